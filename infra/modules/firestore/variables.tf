variable "project_id" {
  description = "Project that owns the database."
  type        = string
}

variable "database" {
  description = "Firestore database id; \"(default)\" is what the Firestore clients use without configuration."
  type        = string
  default     = "(default)"
}

variable "location_id" {
  description = "Firestore location (a region, or a multi-region such as nam5 / eur3)."
  type        = string
}

variable "point_in_time_recovery" {
  description = "Keep 7 days of point-in-time recovery."
  type        = bool
  default     = false
}

variable "delete_protection" {
  description = "Refuse deletion of the database through the API."
  type        = bool
  default     = true
}

variable "kv_collection" {
  description = "Collection of the key-value store's documents (NOETL_KV_COLLECTION): the TTL policy and index exemptions are declared on it."
  type        = string
  default     = "noetl-kv"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,100}$", var.kv_collection))
    error_message = "kv_collection is 1-100 letters, digits, dashes or underscores (the kv_collection setting)."
  }
}
