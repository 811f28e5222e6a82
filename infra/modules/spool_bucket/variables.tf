variable "project_id" {
  description = "Project that owns the bucket."
  type        = string
}

variable "name" {
  description = "Globally unique bucket name."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", var.name))
    error_message = "A bucket name is 3-63 lowercase letters, digits, dots, dashes or underscores."
  }
}

variable "location" {
  description = "Bucket location (a region such as the Cloud Run region, or a multi-region)."
  type        = string
}

variable "storage_class" {
  description = "Default storage class of new objects."
  type        = string
  default     = "STANDARD"

  validation {
    condition     = contains(["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"], var.storage_class)
    error_message = "storage_class must be STANDARD, NEARLINE, COLDLINE or ARCHIVE."
  }
}

variable "lifecycle_policy" {
  description = "Retention: dead-lettered spool items (written with customTime) are deleted dead_letter_age_days after it; every object after delete_after_days when set; objects move to Coldline after coldline_after_days when set."
  type = object({
    dead_letter_age_days = optional(number, 30)
    delete_after_days    = optional(number)
    coldline_after_days  = optional(number)
  })
  default = {}

  validation {
    condition     = var.lifecycle_policy.dead_letter_age_days >= 1 && (var.lifecycle_policy.delete_after_days == null ? true : var.lifecycle_policy.delete_after_days >= 1) && (var.lifecycle_policy.coldline_after_days == null ? true : var.lifecycle_policy.coldline_after_days >= 1)
    error_message = "Lifecycle ages are whole days, at least 1."
  }
}

variable "kms_key_name" {
  description = "Customer-managed encryption key (projects/.../cryptoKeys/...) for new objects; null = Google-managed. The Cloud Storage service agent needs encrypterDecrypter on it."
  type        = string
  default     = null
}

variable "versioning" {
  description = "Keep noncurrent object versions."
  type        = bool
  default     = false
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete a bucket that still holds objects."
  type        = bool
  default     = false
}

variable "labels" {
  description = "Labels of the bucket."
  type        = map(string)
  default     = {}
}
