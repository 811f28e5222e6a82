variable "project_id" {
  description = "Project that owns the function."
  type        = string
}

variable "region" {
  description = "Region of the function."
  type        = string
}

variable "name" {
  description = "Function name, also the name of the Cloud Run service it runs as (so its URL is the stack's deterministic https://<name>-<project number>.<region>.run.app)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,48}[a-z0-9]$", var.name))
    error_message = "A function name is lowercase letters, digits and dashes, at most 49 characters."
  }
}

variable "role" {
  description = "The NoETL HTTP role the function serves: its entry point is the function named after the role in functions/<role>/main.py."
  type        = string

  validation {
    condition     = contains(["execute", "ingress", "worker", "projector", "frames", "spool_drainer"], var.role)
    error_message = "Only HTTP roles run as Cloud Functions (subscription_runtime is a pull loop: Cloud Run)."
  }
}

variable "stack" {
  description = "Name prefix of the deployment (label noetl-stack: Cloud Build finds the functions of one stack by it)."
  type        = string
  default     = "noetl"
}

variable "source_archive" {
  description = "The function's source: the archive functions/package_function.py writes (main.py, requirements.txt, noetl_cloud/), as a Cloud Storage object. Read at creation; Cloud Build rolls out later sources (Terraform ignores them)."
  type = object({
    bucket = string
    object = string
  })
}

variable "runtime" {
  description = "The Cloud Functions runtime; the image's Python (functions/Dockerfile) and functions/requirements.lock are 3.11."
  type        = string
  default     = "python311"
}

variable "build_service_account_email" {
  description = "The account Cloud Functions builds the source as (the deployer: it reads the source bucket and writes to docker_repository)."
  type        = string
}

variable "docker_repository" {
  description = "Artifact Registry repository the function's built image goes to (projects/<p>/locations/<r>/repositories/<name>): the stack's, where the deployer may write."
  type        = string
}

variable "service_account_email" {
  description = "Identity the function runs as (the role's own account)."
  type        = string
}

variable "env" {
  description = "Plain environment variables (never secrets)."
  type        = map(string)
  default     = {}
}

variable "secret_env" {
  description = "Environment variables read from Secret Manager at start: name -> secret id and version."
  type = map(object({
    secret  = string
    version = optional(string, "latest")
  }))
  default = {}
}

variable "ingress" {
  description = "Who may reach it, in Cloud Run's terms (the stack's roles map): INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  type        = string
  default     = "INGRESS_TRAFFIC_INTERNAL_ONLY"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress)
    error_message = "ingress is INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "allow_unauthenticated" {
  description = "Let allUsers invoke it (the public ingress role only; its listeners verify signatures)."
  type        = bool
  default     = false
}

variable "invokers" {
  description = "IAM members that may invoke it (run.invoker on the Cloud Run service it runs as)."
  type        = set(string)
  default     = []
}

variable "developers" {
  description = "IAM members that may deploy new sources (the Cloud Build deployer): cloudfunctions.developer on this function only."
  type        = set(string)
  default     = []
}

variable "scaling" {
  description = "Instances, concurrent requests per instance and request timeout (an HTTP function allows up to 3600 s)."
  type = object({
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
    concurrency     = optional(number, 80)
    timeout_seconds = optional(number, 300)
  })
  default = {}

  validation {
    condition     = var.scaling.timeout_seconds >= 1 && var.scaling.timeout_seconds <= 3600 && var.scaling.concurrency >= 1
    error_message = "An HTTP function's timeout is 1 to 3600 s and its concurrency at least 1."
  }
}

variable "resources" {
  description = "CPU and memory of an instance (more than one concurrent request needs at least 1 CPU)."
  type = object({
    cpu    = optional(string, "1")
    memory = optional(string, "512Mi")
  })
  default = {}
}

variable "vpc_connector" {
  description = "Serverless VPC Access connector (projects/<p>/locations/<r>/connectors/<name>) for private egress (a private-IP Cloud SQL); null = none. Functions have no Direct VPC egress."
  type        = string
  default     = null
}

variable "labels" {
  description = "Labels of the function."
  type        = map(string)
  default     = {}
}
