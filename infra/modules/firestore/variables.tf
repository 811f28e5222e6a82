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
