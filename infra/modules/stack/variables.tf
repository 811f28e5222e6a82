variable "project_id" {
  description = "Google Cloud project to deploy into."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id is a Google Cloud project id (6-30 lowercase letters, digits, dashes)."
  }
}

variable "region" {
  description = "Region of the Cloud Run services, Cloud SQL, the buckets, the scheduler jobs and the image repository."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of every resource name (<prefix>-<role>, <prefix>-spool-<project>, ...)."
  type        = string
  default     = "noetl"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,8}$", var.name_prefix))
    error_message = "name_prefix is 1-9 lowercase letters, digits or dashes, starting with a letter."
  }
}

variable "image" {
  description = "Image of the first revision of every service and of the migration job. Cloud Build replaces it on every build (Terraform ignores later image changes), so the default is Google's public placeholder."
  type        = string
  nullable    = false
  default     = "us-docker.pkg.dev/cloudrun/container/hello"
}

variable "roles" {
  description = "The roles to deploy, keyed by role name, with their Cloud Run sizing and (control plane) database pool; GUNICORN_THREADS, the push ack deadlines, the scheduler attempt deadlines and the connection budget are derived from it (modules/sizing, docs/deploy.md Sizing). deployable: run (a Cloud Run service from the image) or function (a 2nd-gen Cloud Function from the same source, HTTP roles only: docs/deploy.md Cloud Functions). Every role by default; a role left out gets no service, no service account and no grants. worker runs one service per pool (var.pools) and subscription_runtime one per entry of var.runtime_subscriptions, each with the role's sizing."
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
  nullable = false
  default = {
    execute = {
      ingress     = "INGRESS_TRAFFIC_ALL"
      cpu_idle    = false
      concurrency = 20
    }
    ingress = {
      ingress     = "INGRESS_TRAFFIC_ALL"
      concurrency = 80
      memory      = "256Mi"
    }
    worker = {
      concurrency     = 8
      timeout_seconds = 600
      memory          = "1Gi"
    }
    projector = {
      concurrency   = 20
      max_instances = 5
    }
    frames = {
      ingress       = "INGRESS_TRAFFIC_ALL"
      cpu_idle      = false
      concurrency   = 20
      max_instances = 5
    }
    spool_drainer = {
      ingress         = "INGRESS_TRAFFIC_ALL"
      concurrency     = 1
      max_instances   = 2
      timeout_seconds = 900
    }
    # Several instances share one subscription: SIGTERM (scale-in, roll-out) drains only the
    # instance it hits, the others keep pulling (docs/runtime.md, "Scaling").
    subscription_runtime = {
      min_instances = 1
      max_instances = 4
      cpu_idle      = false
    }
  }

  validation {
    condition     = alltrue([for r in keys(var.roles) : contains(["execute", "ingress", "worker", "projector", "frames", "spool_drainer", "subscription_runtime"], r)])
    error_message = "Roles are execute, ingress, worker, projector, frames, spool_drainer, subscription_runtime."
  }

  validation {
    condition     = contains(keys(var.roles), "execute")
    error_message = "The execute role (the control plane) is always deployed."
  }

  validation {
    condition     = alltrue([for r in ["execute", "frames"] : !contains(keys(var.roles), r) || !try(var.roles[r].cpu_idle, true) || try(var.roles[r].env["NOETL_OUTBOX_PUBLISH"], "background") == "inline"])
    error_message = "execute and frames publish committed outbox rows from a relay thread after they answer (docs/architecture.md): cpu_idle = false, or env NOETL_OUTBOX_PUBLISH = \"inline\"."
  }

  validation {
    condition     = alltrue([for r in values(var.roles) : length(setintersection(keys(r.env), ["GUNICORN_THREADS", "NOETL_DB_POOL_SIZE", "NOETL_DB_MAX_OVERFLOW"])) == 0])
    error_message = "GUNICORN_THREADS, NOETL_DB_POOL_SIZE and NOETL_DB_MAX_OVERFLOW are derived from concurrency, db_pool_size and db_max_overflow (modules/sizing): set those instead of env."
  }

  validation {
    condition     = alltrue([for r, v in var.roles : contains(["run", "function"], v.deployable) && (v.deployable == "run" || r != "subscription_runtime")])
    error_message = "deployable is run or function; subscription_runtime is a pull consumer, not an HTTP function: run (docs/deploy.md, Cloud Functions)."
  }

  validation {
    condition     = alltrue([for r, v in var.roles : v.deployable == "run" || v.cpu_idle])
    error_message = "A Cloud Function's CPU is throttled between requests: a role deployed as a function needs cpu_idle = true (execute and frames then need env NOETL_OUTBOX_PUBLISH = \"inline\")."
  }

  validation {
    condition     = !contains(keys(var.roles), "subscription_runtime") || try(var.roles["subscription_runtime"].min_instances >= 1 && !var.roles["subscription_runtime"].cpu_idle, false)
    error_message = "subscription_runtime holds a pull subscription: min_instances >= 1 and cpu_idle = false."
  }
}

variable "pools" {
  description = "Execution pools (NOETL_POOLS): one command topic, push subscription and dead-letter topic each."
  type        = set(string)
  default     = ["shared"]

  validation {
    condition     = length(var.pools) > 0 && alltrue([for p in var.pools : can(regex("^[a-z][a-z0-9-]{0,30}$", p))])
    error_message = "At least one pool; pool names match ^[a-z][a-z0-9-]{0,30}$."
  }
}

variable "tenant" {
  description = "Isolation boundary of everything this deployment writes (NOETL_TENANT_ID, NOETL_ORGANIZATION_ID) and its log level."
  type = object({
    tenant_id       = optional(string, "default")
    organization_id = optional(string, "default")
    log_level       = optional(string, "INFO")
  })
  default = {}

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR"], var.tenant.log_level)
    error_message = "log_level is DEBUG, INFO, WARNING or ERROR."
  }
}

variable "telemetry" {
  description = "OpenTelemetry of every role (docs/observability.md): spans to Cloud Trace (cloud) or none (off), the share of new traces kept, metrics to Cloud Monitoring (cloud) or none (off)."
  type = object({
    tracing      = optional(string, "cloud")
    sample_ratio = optional(number, 0.1)
    metrics      = optional(string, "cloud")
  })
  default = {}

  validation {
    condition     = contains(["off", "cloud"], var.telemetry.tracing) && contains(["off", "cloud"], var.telemetry.metrics)
    error_message = "telemetry.tracing and telemetry.metrics are off or cloud."
  }

  validation {
    condition     = var.telemetry.sample_ratio >= 0 && var.telemetry.sample_ratio <= 1
    error_message = "telemetry.sample_ratio is between 0 and 1."
  }
}

variable "firestore_location" {
  description = "Firestore location (a region or a multi-region such as nam5 / eur3)."
  type        = string
}

variable "cloudsql" {
  description = "The PostgreSQL 15 instance: machine, backups/PITR, private network, deletion protection (see modules/cloudsql); max_connections (the database flag) and the connections kept free for Cloud SQL's agents and operators, which the control plane's pools must fit beside (modules/sizing)."
  type = object({
    tier                           = optional(string, "db-custom-1-3840")
    availability_type              = optional(string, "ZONAL")
    disk_size_gb                   = optional(number, 10)
    retained_backups               = optional(number, 14)
    point_in_time_recovery_enabled = optional(bool, true)
    transaction_log_retention_days = optional(number, 7)
    private_network                = optional(string)
    deletion_protection            = optional(bool, true)
    max_connections                = optional(number, 200)
    reserved_connections           = optional(number, 10)
    admin_password_version         = optional(number, 1)
  })
  default = {}
}

variable "vpc_access" {
  description = "Direct VPC egress of the control-plane services and the migration job (required when cloudsql.private_network is set); null = none."
  type = object({
    network    = string
    subnetwork = string
    egress     = optional(string, "PRIVATE_RANGES_ONLY")
  })
  default = null
}

variable "buckets" {
  description = "Spool, payload, archive and build-source buckets: dead-letter retention of the spool, payload expiry (the TTL safety net of payload retention; longer than every retention policy), archive expiry and its move to Coldline, days the uploaded build sources are kept, optional CMEK, force_destroy for throwaway environments."
  type = object({
    spool_dead_letter_days      = optional(number, 30)
    payload_delete_days         = optional(number, 400)
    archive_delete_days         = optional(number, 730)
    archive_coldline_after_days = optional(number, 30)
    build_source_delete_days    = optional(number, 30)
    kms_key_name                = optional(string)
    force_destroy               = optional(bool, false)
  })
  default = {}
}

variable "webhook_secrets" {
  description = "Secret Manager secret ids of the listeners' verification secrets (the aliases of verify.secret). Terraform creates the empty secrets; values are added with gcloud, never through Terraform."
  type        = set(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.webhook_secrets : can(regex("^[A-Za-z0-9_-]{1,255}$", s))])
    error_message = "Secret ids are letters, digits, dashes and underscores."
  }
}

variable "runtime_subscriptions" {
  description = "Continuous pull subscriptions, keyed by a short name: one subscription_runtime service each (<prefix>-runtime-<name>), holding the catalog entry at path (NOETL_SUBSCRIPTION_PATH). source_subscription is the full id (projects/<p>/subscriptions/<s>) of the user's Pub/Sub subscription it pulls, granted pubsub.subscriber to the runtime's account; null for a NATS source."
  type = map(object({
    path                = string
    source_subscription = optional(string)
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.runtime_subscriptions) : can(regex("^[a-z][a-z0-9-]{0,30}$", name))])
    error_message = "Runtime subscription names match ^[a-z][a-z0-9-]{0,30}$ (they name a Cloud Run service)."
  }

  validation {
    condition     = alltrue([for s in values(var.runtime_subscriptions) : s.source_subscription == null || can(regex("^projects/[^/]+/subscriptions/[^/]+$", s.source_subscription))])
    error_message = "source_subscription is a full subscription id: projects/<project>/subscriptions/<name>."
  }
}

variable "operators" {
  description = "Service accounts (serviceAccount:<email>) of the operator caller role: the internal APIs of execute, projector and the spool drainer (the CLI, the console, replay verification, noetl-cloud execute; the routes noetl_cloud.auth.roles.POLICY admits operators to): granted run.invoker on those services and listed as operator=<email> in their NOETL_INTERNAL_API_CALLERS. The apps verify ID tokens minted for their URL, which a person gets by impersonating one of these accounts (docs/deploy.md)."
  type        = set(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.operators : can(regex("^serviceAccount:[^@\\s]+@[^@\\s]+$", m))])
    error_message = "Each operator is serviceAccount:<email> (a user's own ID token cannot carry a service's URL as its audience)."
  }
}

variable "keychain_secrets" {
  description = "Secret Manager secret ids of task credentials: keychain-<alias> for a task's auth: <alias> (docs/dsl.md, Credentials). Terraform creates the empty secrets and lets the worker role read them, and only them; values are added with gcloud, never through Terraform."
  type        = set(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.keychain_secrets : can(regex("^keychain-[A-Za-z0-9_.-]{1,245}$", s))])
    error_message = "Keychain secret ids are keychain-<alias>: letters, digits, dots, dashes and underscores after the prefix."
  }
}

variable "scheduled_sources" {
  description = "Full ids (projects/<p>/subscriptions/<s>) of the Pub/Sub subscriptions that activation: scheduled subscriptions poll: the execute role's subscription tick pulls them, so its account is granted pubsub.subscriber on each (docs/runtime.md, Scheduled subscriptions)."
  type        = set(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.scheduled_sources : can(regex("^projects/[^/]+/subscriptions/[^/]+$", s))])
    error_message = "Each scheduled source is a full subscription id: projects/<project>/subscriptions/<name>."
  }
}

variable "scheduled_subscriptions" {
  description = "Playbooks started on a schedule, keyed by job name: cron schedule, catalog path, workload as a JSON object text, time zone."
  type = map(object({
    schedule  = string
    path      = string
    workload  = optional(string, "{}")
    time_zone = optional(string, "Etc/UTC")
  }))
  default = {}

  validation {
    condition     = alltrue([for s in values(var.scheduled_subscriptions) : can(jsondecode(s.workload))])
    error_message = "workload is a JSON object text."
  }
}

variable "maintenance_schedules" {
  description = "Cron schedules overriding the built-in jobs' own (shared/noetl_cloud/maintenance/schedule.py, docs/operations.md), keyed outbox_sweep, command_reaper, retention, subscription_tick, frame_reaper, projector_catch_up, drainer."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.maintenance_schedules) : contains(["outbox_sweep", "command_reaper", "retention", "subscription_tick", "frame_reaper", "projector_catch_up", "drainer"], k)])
    error_message = "maintenance_schedules keys are outbox_sweep, command_reaper, retention, subscription_tick, frame_reaper, projector_catch_up and drainer."
  }
}

variable "deletion_protection" {
  description = "Protect the services, the migration job and the Firestore database against deletion."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels of every labelled resource."
  type        = map(string)
  default     = {}
}

variable "alerts" {
  description = "The alert policies (modules/monitoring, docs/deploy.md Alerts): the notification channels every policy notifies (projects/<p>/notificationChannels/<n>; none = incidents in the console only) and the thresholds (null = the module's defaults)."
  type = object({
    notification_channels = optional(list(string), [])
    thresholds = optional(object({
      dead_letter_messages   = optional(number)
      error_ratio            = optional(number)
      connection_ratio       = optional(number)
      duration_seconds       = optional(number)
      runtime_silent_seconds = optional(number)
    }), {})
  })
  nullable = false
  default  = {}
}

variable "build_trigger" {
  description = "The Cloud Build trigger (modules/build_trigger): the repository it watches (a 2nd-gen repository id, or github_owner and github_name of a repository connected through the Cloud Build GitHub app) and the branch regex; null = no trigger (builds run by gcloud builds submit)."
  type = object({
    repository   = optional(string)
    github_owner = optional(string)
    github_name  = optional(string)
    branch       = optional(string, "^main$")
  })
  default = null
}

variable "functions" {
  description = "What the roles deployed as Cloud Functions (roles[*].deployable = \"function\") share: the runtime (the image's Python), and a Serverless VPC Access connector for private egress (functions have no Direct VPC egress; needed for a private-IP Cloud SQL)."
  type = object({
    runtime       = optional(string, "python311")
    vpc_connector = optional(string)
  })
  nullable = false
  default  = {}
}
