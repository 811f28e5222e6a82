variable "project_id" {
  description = "Project that owns the service accounts and the grants."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of every service account id (<prefix>-<role>)."
  type        = string
  default     = "noetl"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,8}$", var.name_prefix))
    error_message = "name_prefix is 1-9 lowercase letters, digits or dashes, starting with a letter."
  }
}

variable "roles" {
  description = "The roles deployed (keys of the stack's roles map); each gets its own service account."
  type        = set(string)

  validation {
    condition     = alltrue([for r in var.roles : contains(["execute", "ingress", "worker", "projector", "frames", "spool_drainer", "subscription_runtime"], r)])
    error_message = "Roles are execute, ingress, worker, projector, frames, spool_drainer, subscription_runtime."
  }
}

variable "resources" {
  description = "The resources the grants are scoped to (each grant names one resource, never the whole project, where the service allows it)."
  type = object({
    cloudsql_instance    = string
    firestore_database   = string
    command_topics       = map(string)
    events_topic         = string
    spool_bucket         = string
    payload_bucket       = string
    archive_bucket       = string
    build_source_bucket  = string
    db_admin_secret      = string
    webhook_secrets      = optional(set(string), [])
    keychain_secrets     = optional(set(string), [])
    source_subscriptions = optional(set(string), [])
    scheduled_sources    = optional(set(string), [])
    artifact_registry = object({
      location   = string
      repository = string
    })
  })
}

variable "operators" {
  description = "Service accounts (serviceAccount:<email>) allowed to call the internal APIs of execute and projector: run.invoker there and in the apps' allowlists."
  type        = set(string)
  default     = []
}

variable "pubsub_service_agent" {
  description = "The project's Pub/Sub service agent as an IAM member (it mints the push subscriptions' OIDC tokens on projects created before 2021-04-08), from google_project_service_identity."
  type        = string
}
