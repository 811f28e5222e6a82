variable "project_id" {
  description = "Project that owns the service."
  type        = string
}

variable "region" {
  description = "Region of the service."
  type        = string
}

variable "name" {
  description = "Service name (lowercase letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,48}[a-z0-9]$", var.name))
    error_message = "A Cloud Run service name is lowercase letters, digits and dashes, at most 49 characters."
  }
}

variable "role" {
  description = "The NoETL role this service runs (NOETL_ROLE); the image's entrypoint serves functions/<role>."
  type        = string
}

variable "stack" {
  description = "Name prefix of the deployment this service belongs to (label noetl-stack: Cloud Build rolls out the services of one stack)."
  type        = string
  default     = "noetl"
}

variable "probes" {
  description = "Health checks on the container port: a startup probe on path (every service), and a liveness probe on the same path when liveness is true (the subscription runtime, whose loop runs beside its health server)."
  type = object({
    path                      = optional(string, "/healthz")
    liveness                  = optional(bool, false)
    period_seconds            = optional(number, 3)
    startup_failure_threshold = optional(number, 40)
  })
  default = {}

  validation {
    condition     = startswith(var.probes.path, "/") && var.probes.period_seconds >= 1 && var.probes.startup_failure_threshold >= 1
    error_message = "probes.path starts with /; period_seconds and startup_failure_threshold are at least 1."
  }
}

variable "image" {
  description = "Image of the first revision. Later revisions are rolled out by Cloud Build (gcloud run services update --image), so Terraform ignores image changes."
  type        = string
}

variable "service_account_email" {
  description = "Identity of the service (one per role)."
  type        = string
}

variable "env" {
  description = "Plain environment variables (never secrets)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.env) : !can(regex("(TOKEN|PASSWORD|SECRET)", k))])
    error_message = "A variable that looks like a secret belongs in secret_env (a Secret Manager reference), not env."
  }
}

variable "secret_env" {
  description = "Environment variables read from Secret Manager at start: variable name => {secret id, version}."
  type = map(object({
    secret  = string
    version = optional(string, "latest")
  }))
  default = {}
}

variable "scaling" {
  description = "Instances (min_instances > 0 keeps warm instances that are billed while idle), per-instance request concurrency and request timeout."
  type = object({
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
    concurrency     = optional(number, 80)
    timeout_seconds = optional(number, 300)
  })
  default = {}

  validation {
    condition     = var.scaling.min_instances >= 0 && var.scaling.max_instances >= max(1, var.scaling.min_instances)
    error_message = "min_instances >= 0 and max_instances >= max(1, min_instances)."
  }

  validation {
    condition     = var.scaling.concurrency >= 1 && var.scaling.concurrency <= 1000 && var.scaling.timeout_seconds >= 1 && var.scaling.timeout_seconds <= 3600
    error_message = "concurrency is 1..1000 and timeout_seconds 1..3600."
  }
}

variable "resources" {
  description = "CPU and memory of an instance; cpu_idle=false keeps CPU allocated between requests (a pull loop needs it)."
  type = object({
    cpu               = optional(string, "1")
    memory            = optional(string, "512Mi")
    cpu_idle          = optional(bool, true)
    startup_cpu_boost = optional(bool, true)
  })
  default = {}
}

variable "ingress" {
  description = "Who may reach the service over the network: INGRESS_TRAFFIC_ALL (the public ingress role), INGRESS_TRAFFIC_INTERNAL_ONLY, INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress)
    error_message = "ingress must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "allow_unauthenticated" {
  description = "Grant run.invoker to allUsers. Only the ingress role may set it (it verifies every delivery itself)."
  type        = bool
  default     = false
}

variable "invokers" {
  description = "IAM members granted run.invoker on this service (service accounts of the callers)."
  type        = set(string)
  default     = []
}

variable "developers" {
  description = "IAM members granted run.developer on this service only (the deployer, which rolls out new images)."
  type        = set(string)
  default     = []
}

variable "vpc_access" {
  description = "Direct VPC egress (needed to reach a private-IP Cloud SQL instance); null = none."
  type = object({
    network    = string
    subnetwork = string
    egress     = optional(string, "PRIVATE_RANGES_ONLY")
  })
  default = null
}

variable "deletion_protection" {
  description = "Refuse terraform destroy of the service."
  type        = bool
  default     = false
}

variable "labels" {
  description = "Labels of the service."
  type        = map(string)
  default     = {}
}

variable "custom_audiences" {
  description = "Audiences besides the service's URL that Cloud Run accepts in ID tokens (e.g. the control plane's URL, for calls it forwards with the caller's token)."
  type        = list(string)
  default     = []
}
