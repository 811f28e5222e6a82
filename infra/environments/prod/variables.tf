variable "project_id" {
  description = "Google Cloud project of the prod environment."
  type        = string
}

variable "region" {
  description = "Region of every regional resource."
  type        = string
}

variable "firestore_location" {
  description = "Firestore location (a region or a multi-region such as nam5 / eur3)."
  type        = string
}

variable "image" {
  description = "Image of the first revision; null = the placeholder (Cloud Build deploys the real image)."
  type        = string
  default     = null
}

variable "roles" {
  description = "Roles to deploy with their sizing; null = every role with the defaults of modules/stack."
  type = map(object({
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
    concurrency     = optional(number, 80)
    timeout_seconds = optional(number, 300)
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    cpu_idle        = optional(bool, true)
    ingress         = optional(string, "INGRESS_TRAFFIC_INTERNAL_ONLY")
    db_pool_size    = optional(number, 5)
    db_max_overflow = optional(number, 2)
    env             = optional(map(string), {})
    secret_env = optional(map(object({
      secret  = string
      version = optional(string, "latest")
    })), {})
    deployable = optional(string, "run")
  }))
  default = null
}

variable "pools" {
  description = "Execution pools (one command topic and push subscription each)."
  type        = set(string)
  default     = ["shared"]
}

variable "webhook_secrets" {
  description = "Secret Manager secret ids of the listeners' verification secrets (created empty; values added with gcloud)."
  type        = set(string)
  default     = []
}

variable "runtime_subscriptions" {
  description = "Continuous pull subscriptions, one subscription_runtime service each: catalog path and the full id of the Pub/Sub subscription it pulls (see modules/stack)."
  type = map(object({
    path                = string
    source_subscription = optional(string)
  }))
  default = {}
}

variable "operators" {
  description = "Service accounts (serviceAccount:<email>) allowed to call the internal APIs of execute and projector (replay verification); people impersonate them."
  type        = set(string)
  default     = []
}

variable "keychain_secrets" {
  description = "Secret Manager secret ids of task credentials, keychain-<alias> (created empty; values added with gcloud; readable by the worker only)."
  type        = set(string)
  default     = []
}

variable "scheduled_sources" {
  description = "Pub/Sub subscriptions (full ids) that activation: scheduled subscriptions poll; the execute role may pull them (see modules/stack)."
  type        = set(string)
  default     = []
}

variable "scheduled_subscriptions" {
  description = "Playbooks started on a schedule, keyed by job name."
  type = map(object({
    schedule  = string
    path      = string
    workload  = optional(string, "{}")
    time_zone = optional(string, "Etc/UTC")
  }))
  default = {}
}

variable "private_network" {
  description = "VPC self link with private services access, for the private-IP Cloud SQL instance."
  type        = string
}

variable "vpc_subnetwork" {
  description = "Subnetwork of that VPC the control-plane services egress through (Direct VPC egress)."
  type        = string
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channels every alert policy notifies (projects/<p>/notificationChannels/<n>); empty = incidents in the console only."
  type        = list(string)
  default     = []
}

variable "build_trigger" {
  description = "The repository and branch the Cloud Build trigger watches (see modules/stack); null = no trigger."
  type = object({
    repository   = optional(string)
    github_owner = optional(string)
    github_name  = optional(string)
    branch       = optional(string, "^main$")
  })
  default = null
}
