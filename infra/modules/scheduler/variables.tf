variable "project_id" {
  description = "Project that owns the jobs."
  type        = string
}

variable "region" {
  description = "Region of the jobs (Cloud Scheduler location)."
  type        = string
}

variable "service_account_email" {
  description = "Identity whose OIDC token every job presents (it may invoke only the services the jobs call)."
  type        = string
}

variable "jobs" {
  description = "HTTP jobs keyed by name: cron schedule, target URL and OIDC audience, method, JSON body, retries."
  type = map(object({
    description      = string
    schedule         = string
    uri              = string
    audience         = string
    http_method      = optional(string, "POST")
    body             = optional(string)
    time_zone        = optional(string, "Etc/UTC")
    attempt_deadline = optional(string, "320s")
    retry_count      = optional(number, 1)
    paused           = optional(bool, false)
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.jobs) : can(regex("^[a-z][a-z0-9-]{0,62}$", name))])
    error_message = "Job names are lowercase letters, digits and dashes."
  }

  validation {
    condition     = alltrue([for j in values(var.jobs) : contains(["GET", "POST", "PUT", "DELETE", "PATCH"], j.http_method)])
    error_message = "http_method must be GET, POST, PUT, DELETE or PATCH."
  }
}
