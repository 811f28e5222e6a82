variable "project_id" {
  description = "Project that owns the instance."
  type        = string
}

variable "region" {
  description = "Region of the instance (the Cloud Run region)."
  type        = string
}

variable "name" {
  description = "Instance name."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,97}$", var.name))
    error_message = "An instance name starts with a letter and holds lowercase letters, digits and dashes."
  }
}

variable "database" {
  description = "Name of the NoETL database (NOETL_DB_NAME)."
  type        = string
  default     = "noetl"
}

variable "instance" {
  description = "Machine, availability and storage of the PostgreSQL 15 instance."
  type = object({
    tier              = optional(string, "db-custom-1-3840")
    edition           = optional(string, "ENTERPRISE")
    availability_type = optional(string, "ZONAL")
    disk_size_gb      = optional(number, 10)
    disk_autoresize   = optional(bool, true)
    max_connections   = optional(number, 200)
  })
  default = {}

  validation {
    condition     = contains(["ZONAL", "REGIONAL"], var.instance.availability_type)
    error_message = "availability_type must be ZONAL or REGIONAL (high availability)."
  }

  validation {
    condition     = contains(["ENTERPRISE", "ENTERPRISE_PLUS"], var.instance.edition)
    error_message = "edition must be ENTERPRISE or ENTERPRISE_PLUS."
  }
}

variable "network" {
  description = "Connectivity: private_network (a VPC self link with private services access already peered) gives a private IP only; null keeps a public IP that only the Cloud SQL connector (IAM-authorized TLS) can use - no authorized networks are ever added."
  type = object({
    private_network = optional(string)
    allocated_range = optional(string)
  })
  default = {}
}

variable "backup" {
  description = "Automated backups and point-in-time recovery (write-ahead log retention)."
  type = object({
    enabled                        = optional(bool, true)
    start_time                     = optional(string, "03:00")
    retained_backups               = optional(number, 14)
    point_in_time_recovery_enabled = optional(bool, true)
    transaction_log_retention_days = optional(number, 7)
  })
  default = {}

  validation {
    condition     = var.backup.transaction_log_retention_days >= 1 && var.backup.transaction_log_retention_days <= 35
    error_message = "transaction_log_retention_days is 1..35 (Enterprise: at most 7)."
  }

  validation {
    condition     = !var.backup.point_in_time_recovery_enabled || var.backup.enabled
    error_message = "Point-in-time recovery needs backups enabled."
  }
}

variable "iam_service_accounts" {
  description = "Service account emails that become IAM database users (NOETL_DB_IAM_AUTH=true), keyed by a name known at plan (the role: the control-plane roles and migrate). The keys, not the emails, key the users, so a first plan does not wait on the accounts."
  type        = map(string)
  default     = {}
}

variable "deletion_protection" {
  description = "Protect the instance against deletion, in Terraform and in the Cloud SQL API."
  type        = bool
  default     = true
}

variable "maintenance_window" {
  description = "Weekly maintenance window (day 1 = Monday, hour in UTC)."
  type = object({
    day  = optional(number, 7)
    hour = optional(number, 3)
  })
  default = {}
}

variable "labels" {
  description = "User labels of the instance."
  type        = map(string)
  default     = {}
}

variable "admin" {
  description = "The built-in admin user the migration job grants schema access with (noetl_cloud.dbaccess): its name, and the version of its password (raise it to rotate)."
  type = object({
    name             = string
    password_version = optional(number, 1)
  })
}

variable "admin_password" {
  description = "The admin user's password: an ephemeral value (never stored in the state), sent when password_version changes."
  type        = string
  ephemeral   = true
  sensitive   = true
}
