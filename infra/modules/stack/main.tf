# The whole deployment: what ARCHITECTURE.md §3 and §6 describe, composed from the modules.

data "google_project" "this" {
  project_id = var.project_id
}

locals {
  roles         = toset(keys(var.roles))
  control_plane = setintersection(local.roles, ["execute", "frames", "projector"])
  api_clients   = setintersection(local.roles, ["ingress", "worker", "spool_drainer", "subscription_runtime"])

  # One Cloud Run service per role, except worker (one per pool: each command topic pushes to its
  # own service, so pools scale and fail independently) and subscription_runtime (one per held
  # subscription). Keys: the role, worker-<pool>, subscription_runtime-<name>.
  services = merge(
    {
      for r in local.roles : r => {
        role         = r
        name         = "${var.name_prefix}-${replace(r, "_", "-")}"
        pool         = null
        subscription = null
      } if !contains(["worker", "subscription_runtime"], r)
    },
    {
      for p in var.pools : "worker-${p}" => {
        role         = "worker"
        name         = "${var.name_prefix}-worker-${p}"
        pool         = p
        subscription = null
      } if contains(local.roles, "worker")
    },
    {
      for n, s in var.runtime_subscriptions : "subscription_runtime-${n}" => {
        role         = "subscription_runtime"
        name         = "${var.name_prefix}-runtime-${n}"
        pool         = null
        subscription = s.path
      } if contains(local.roles, "subscription_runtime")
    },
  )

  # Deterministic Cloud Run URLs (https://<service>-<project number>.<region>.run.app): known at
  # plan time, so every role can name its own URL as the audience of the ID tokens it accepts, and
  # push subscriptions and scheduler jobs can be planned before the services exist.
  service_url = { for k, s in local.services : k => "https://${s.name}-${data.google_project.this.number}.${var.region}.run.app" }
  # The URL of each single-service role (worker and subscription_runtime have one per pool / subscription).
  url = { for k, s in local.services : k => local.service_url[k] if k == s.role }

  # Every path Terraform points a caller at, and the role that must serve it
  # (tests/unit/test_infra_routes.py builds each role's app and proves the route exists).
  routes = {
    worker_push         = { role = "worker", method = "POST", path = "/" }
    projector_push      = { role = "projector", method = "POST", path = "/" }
    outbox_sweep        = { role = "execute", method = "POST", path = "/api/internal/outbox/sweep" }
    command_reaper      = { role = "execute", method = "POST", path = "/api/internal/reaper" }
    retention           = { role = "execute", method = "POST", path = "/api/internal/retention" }
    subscription_tick   = { role = "execute", method = "POST", path = "/api/internal/subscriptions/tick" }
    frame_reaper        = { role = "frames", method = "POST", path = "/api/internal/frames/reap" }
    projector_catch_up  = { role = "projector", method = "POST", path = "/api/internal/projector/catch-up" }
    spool_drain         = { role = "spool_drainer", method = "POST", path = "/drain" }
    scheduled_execution = { role = "execute", method = "POST", path = "/api/execute" }
    health              = { role = "*", method = "GET", path = "/healthz" }
  }

  # The migration job's pool: one upgrade at a time, on one connection plus one spare.
  migrate_connections = 2
  # The built-in user the migration job grants schema access with, and the secret of its password.
  db_admin_user   = "${var.name_prefix}-admin"
  db_admin_secret = "${var.name_prefix}-db-admin-password"

  command_topic_prefix = "${var.name_prefix}-commands-"
  kv_collection        = "${var.name_prefix}-kv"
  events_topic         = "${var.name_prefix}-events"

  apis = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtrace.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "sqladmin.googleapis.com",
    "storage.googleapis.com",
  ])

  # -- environment of each service (every name is a NOETL_ setting: docs/configuration.md) -----
  common_env = {
    NOETL_ENVIRONMENT          = "gcp"
    NOETL_PROJECT_ID           = var.project_id
    NOETL_REGION               = var.region
    NOETL_LOG_LEVEL            = var.tenant.log_level
    NOETL_TENANT_ID            = var.tenant.tenant_id
    NOETL_ORGANIZATION_ID      = var.tenant.organization_id
    NOETL_POOLS                = join(",", sort(tolist(var.pools)))
    NOETL_EVENTS_TOPIC         = local.events_topic
    NOETL_COMMAND_TOPIC_PREFIX = local.command_topic_prefix
    NOETL_TRACING              = var.telemetry.tracing
    NOETL_TRACING_SAMPLE_RATIO = tostring(var.telemetry.sample_ratio)
    NOETL_METRICS              = var.telemetry.metrics
  }
  database_env = {
    NOETL_CLOUDSQL_INSTANCE = module.cloudsql.connection_name
    NOETL_DB_NAME           = module.cloudsql.database
    NOETL_DB_IAM_AUTH       = "true"
    NOETL_CLOUDSQL_IP_TYPE  = module.cloudsql.ip_type
  }
  # The spool's users are the Firestore users (circuits, leases, replay protection): the collection
  # is the one the TTL policy and index exemptions are declared on (modules/firestore).
  spool_env = {
    NOETL_SPOOL_BACKEND = "gcs"
    NOETL_SPOOL_BUCKET  = module.spool_bucket.name
    NOETL_KV_COLLECTION = local.kv_collection
  }

  # What each role needs at start, by role (docs/deploy.md, "What each service is configured with").
  role_env = {
    execute = merge(local.database_env, {
      NOETL_INTERNAL_API_AUDIENCE = try(local.url["execute"], "")
      NOETL_INTERNAL_API_CALLERS  = join(",", module.iam.api_callers["execute"])
      NOETL_SECRETS_BACKEND       = "secret_manager"
      # Retention archives expired executions here (Parquet) before it removes them (docs/retention.md).
      NOETL_PAYLOAD_BACKEND = "gcs"
      NOETL_PAYLOAD_BUCKET  = module.payload_bucket.name
      NOETL_ARCHIVE_BUCKET  = module.archive_bucket.name
      # /api/spool/* (the console's spool page) is forwarded to the drainer (docs/console.md).
      NOETL_SPOOL_DRAINER_URL = try(local.url["spool_drainer"], "")
    })
    frames = merge(local.database_env, {
      NOETL_INTERNAL_API_AUDIENCE = try(local.url["frames"], "")
      NOETL_INTERNAL_API_CALLERS  = join(",", module.iam.api_callers["frames"])
    })
    projector = merge(local.database_env, {
      # /api/* (status, replay) for the operators; POST / for the events subscription's pushes.
      NOETL_INTERNAL_API_AUDIENCE          = try(local.url["projector"], "")
      NOETL_INTERNAL_API_CALLERS           = join(",", module.iam.api_callers["projector"])
      NOETL_PROJECTOR_PUSH_AUDIENCE        = try(local.url["projector"], "")
      NOETL_PROJECTOR_PUSH_SERVICE_ACCOUNT = module.iam.push_email
    })
    ingress = merge(local.spool_env, {
      NOETL_API_URL               = local.url["execute"]
      NOETL_INTERNAL_API_AUDIENCE = local.url["execute"]
      NOETL_SPOOL_DRAINER_URL     = try(local.url["spool_drainer"], "")
    })
    worker = {
      NOETL_API_URL                     = local.url["execute"]
      NOETL_INTERNAL_API_AUDIENCE       = local.url["execute"]
      NOETL_WORKER_PUSH_SERVICE_ACCOUNT = module.iam.push_email
      NOETL_FRAMES_URL                  = try(local.url["frames"], "")
      NOETL_PAYLOAD_BACKEND             = "gcs"
      NOETL_PAYLOAD_BUCKET              = module.payload_bucket.name
      # A task's auth: <alias> is the secret keychain-<alias> (var.keychain_secrets).
      NOETL_SECRETS_BACKEND = "secret_manager"
    }
    spool_drainer = merge(local.spool_env, {
      NOETL_API_URL               = local.url["execute"]
      NOETL_INTERNAL_API_AUDIENCE = local.url["execute"]
      # Its own URL: the audience of the ID tokens it accepts (scheduler, ingress, runtimes).
      NOETL_SPOOL_DRAINER_URL    = try(local.url["spool_drainer"], "")
      NOETL_INTERNAL_API_CALLERS = join(",", module.iam.api_callers["spool_drainer"])
    })
    subscription_runtime = merge(local.spool_env, {
      NOETL_API_URL               = local.url["execute"]
      NOETL_INTERNAL_API_AUDIENCE = local.url["execute"]
      NOETL_SPOOL_DRAINER_URL     = try(local.url["spool_drainer"], "")
    })
  }

  service_env = {
    for k, s in local.services : k => merge(
      local.common_env,
      local.role_env[s.role],
      contains(local.control_plane, s.role) ? {
        NOETL_DB_USER = trimsuffix(module.iam.role_emails[s.role], ".gserviceaccount.com")
        # The pool the connection budget counts (modules/sizing).
        NOETL_DB_POOL_SIZE    = tostring(var.roles[s.role].db_pool_size)
        NOETL_DB_MAX_OVERFLOW = tostring(var.roles[s.role].db_max_overflow)
      } : {},
      s.role == "worker" ? {
        NOETL_WORKER_POOL = s.pool
        # The push subscription of this pool signs its OIDC token as the push identity, for this URL.
        NOETL_WORKER_PUSH_AUDIENCE = local.service_url[k]
      } : {},
      s.role == "subscription_runtime" ? { NOETL_SUBSCRIPTION_PATH = s.subscription } : {},
      var.roles[s.role].env,
      # gunicorn serves as many requests at once as Cloud Run sends (functions/entrypoint.sh).
      contains(keys(module.sizing.gunicorn_threads), s.role) ? { GUNICORN_THREADS = tostring(module.sizing.gunicorn_threads[s.role]) } : {},
    )
  }

  # The built-in jobs (local.maintenance_schedule, generated from the package's schedule into
  # maintenance_schedule.tf): each calls one route (local.routes) of a role, when that role is
  # deployed and the job has work (the command reaper only once workers claim commands);
  # var.maintenance_schedules overrides a job's cron.
  maintenance_jobs = {
    for name, j in local.maintenance_schedule : name => merge(j, {
      schedule = lookup(var.maintenance_schedules, j.setting, j.schedule)
    })
  }

  # Every job presents an OIDC token minted for the URL of the service it calls: the audience that
  # service's app verifies (NOETL_INTERNAL_API_AUDIENCE, or NOETL_SPOOL_DRAINER_URL on the drainer).
  scheduler_jobs = merge(
    {
      for name, j in local.maintenance_jobs : "${var.name_prefix}-${name}" => {
        description = j.description
        schedule    = j.schedule
        uri         = "${local.url[local.routes[j.route].role]}${local.routes[j.route].path}"
        http_method = local.routes[j.route].method
        audience    = local.url[local.routes[j.route].role]
        body        = "{}"
        time_zone   = "Etc/UTC"
        # The attempt lasts as long as the request it makes may (modules/sizing).
        attempt_deadline = "${module.sizing.scheduler_attempt_deadline_seconds[local.routes[j.route].role]}s"
      } if contains(local.roles, j.needs) && contains(local.roles, local.routes[j.route].role)
    },
    {
      for name, s in var.scheduled_subscriptions : "${var.name_prefix}-sched-${name}" => {
        description      = "Scheduled run of ${s.path}."
        schedule         = s.schedule
        uri              = "${local.url[local.routes.scheduled_execution.role]}${local.routes.scheduled_execution.path}"
        http_method      = local.routes.scheduled_execution.method
        audience         = local.url[local.routes.scheduled_execution.role]
        body             = jsonencode({ path = s.path, workload = jsondecode(s.workload), meta = { scheduled_by = name } })
        time_zone        = s.time_zone
        attempt_deadline = "${module.sizing.scheduler_attempt_deadline_seconds[local.routes.scheduled_execution.role]}s"
      }
    },
  )
}

resource "google_project_service" "this" {
  for_each = local.apis

  project            = var.project_id
  service            = each.key
  disable_on_destroy = false
}

resource "google_artifact_registry_repository" "images" {
  project       = var.project_id
  location      = var.region
  repository_id = var.name_prefix
  format        = "DOCKER"
  description   = "NoETL Cloud images (one image, every role)."
  labels        = var.labels

  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 20
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s"
    }
  }

  depends_on = [google_project_service.this]
}

# The wallet: one secret per listener verification secret. Values never pass through Terraform.
resource "google_secret_manager_secret" "webhook" {
  for_each = var.webhook_secrets

  project   = var.project_id
  secret_id = each.key
  labels    = var.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.this]
}

# Task credentials (keychain-<alias>), read by the worker role only. Values never pass through Terraform.
resource "google_secret_manager_secret" "keychain" {
  for_each = var.keychain_secrets

  project   = var.project_id
  secret_id = each.key
  labels    = var.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.this]
}

# Threads, ack deadlines, attempt deadlines and the database connection budget, from the roles map
# and the instance (docs/deploy.md, Sizing); its output preconditions fail the plan of a mismatch.
module "sizing" {
  source = "../sizing"

  roles = var.roles
  database = {
    max_connections      = var.cloudsql.max_connections
    reserved_connections = var.cloudsql.reserved_connections
    migrate_connections  = local.migrate_connections
  }
}

# The Pub/Sub service agent is made by Google some time after the API is enabled; a brand-new
# project's first apply would grant an account that does not exist yet ("Service account ...
# does not exist"). This asks the API to create it (and waits), and the grants that name it read
# its email from here. The resource is in the google-beta provider only.
resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.this]
}

module "iam" {
  source = "../iam"

  project_id           = var.project_id
  pubsub_service_agent = "serviceAccount:${google_project_service_identity.pubsub.email}"
  name_prefix          = var.name_prefix
  roles                = local.roles
  operators            = var.operators
  resources = {
    cloudsql_instance    = module.cloudsql.instance_name
    firestore_database   = module.firestore.name
    command_topics       = module.pubsub.command_topic_names
    events_topic         = module.pubsub.events_topic.name
    spool_bucket         = module.spool_bucket.name
    payload_bucket       = module.payload_bucket.name
    archive_bucket       = module.archive_bucket.name
    build_source_bucket  = module.build_source_bucket.name
    db_admin_secret      = local.db_admin_secret
    webhook_secrets      = var.webhook_secrets
    keychain_secrets     = var.keychain_secrets
    source_subscriptions = toset([for s in values(var.runtime_subscriptions) : s.source_subscription if s.source_subscription != null])
    scheduled_sources    = var.scheduled_sources
    artifact_registry = {
      location   = google_artifact_registry_repository.images.location
      repository = google_artifact_registry_repository.images.repository_id
    }
  }

  # The secret grants name the secrets by id (known at plan), so they wait for the secrets here.
  depends_on = [google_project_service.this, google_secret_manager_secret.webhook, google_secret_manager_secret.keychain, google_secret_manager_secret.db_admin_password]
}

module "pubsub" {
  source = "../pubsub"

  project_id           = var.project_id
  command_topic_prefix = local.command_topic_prefix
  events_topic         = local.events_topic
  labels               = var.labels
  kms_key_name         = null
  # Each pool's command topic pushes to that pool's own worker service, with an OIDC token for it.
  pools = {
    for p in var.pools : p => {
      push_endpoint = try("${local.service_url["worker-${p}"]}${local.routes.worker_push.path}", null)
      audience      = try(local.service_url["worker-${p}"], null)
      # A command runs inside the push request: Pub/Sub waits as long as the worker may run it.
      ack_deadline_seconds = try(module.sizing.push_ack_deadline_seconds["worker"], null)
    }
  }
  events_push = contains(local.roles, local.routes.projector_push.role) ? {
    push_endpoint        = "${try(local.url[local.routes.projector_push.role], "")}${local.routes.projector_push.path}"
    audience             = try(local.url[local.routes.projector_push.role], "")
    ack_deadline_seconds = module.sizing.push_ack_deadline_seconds[local.routes.projector_push.role]
  } : null
  push_service_account_email = module.iam.push_email
  service_agent_member       = "serviceAccount:${google_project_service_identity.pubsub.email}"

  depends_on = [google_project_service.this]
}

module "spool_bucket" {
  source = "../spool_bucket"

  project_id    = var.project_id
  name          = "${var.name_prefix}-spool-${var.project_id}"
  location      = var.region
  kms_key_name  = var.buckets.kms_key_name
  force_destroy = var.buckets.force_destroy
  labels        = var.labels
  lifecycle_policy = {
    dead_letter_age_days = var.buckets.spool_dead_letter_days
  }

  depends_on = [google_project_service.this]
}

module "payload_bucket" {
  source = "../spool_bucket"

  project_id    = var.project_id
  name          = "${var.name_prefix}-payloads-${var.project_id}"
  location      = var.region
  kms_key_name  = var.buckets.kms_key_name
  force_destroy = var.buckets.force_destroy
  labels        = var.labels
  lifecycle_policy = {
    dead_letter_age_days = var.buckets.spool_dead_letter_days
    delete_after_days    = var.buckets.payload_delete_days
  }

  depends_on = [google_project_service.this]
}

# Retention's archive (docs/retention.md): each expired execution's events as one Parquet object, kept
# longer than any payload and moved to Coldline once it is rarely read (replay of old executions).
module "archive_bucket" {
  source = "../spool_bucket"

  project_id    = var.project_id
  name          = "${var.name_prefix}-archive-${var.project_id}"
  location      = var.region
  kms_key_name  = var.buckets.kms_key_name
  force_destroy = var.buckets.force_destroy
  labels        = var.labels
  lifecycle_policy = {
    dead_letter_age_days = var.buckets.spool_dead_letter_days
    delete_after_days    = var.buckets.archive_delete_days
    coldline_after_days  = var.buckets.archive_coldline_after_days
  }

  depends_on = [google_project_service.this]
}

# Where gcloud builds submit uploads the source (--gcs-source-staging-dir): a bucket of the stack, so
# the deployer (a user-specified build service account) is granted read on this bucket alone.
module "build_source_bucket" {
  source = "../spool_bucket"

  project_id    = var.project_id
  name          = "${var.name_prefix}-build-source-${var.project_id}"
  location      = var.region
  force_destroy = true
  labels        = var.labels
  lifecycle_policy = {
    dead_letter_age_days = 1
    delete_after_days    = var.buckets.build_source_delete_days
  }

  depends_on = [google_project_service.this]
}

# The admin user's password: generated in memory at apply, written to the Cloud SQL user and to a
# Secret Manager version through write-only arguments, so it is in neither the plan nor the state.
# The migration job reads it from the secret (NOETL_DB_ADMIN_PASSWORD).
ephemeral "random_password" "db_admin" {
  length  = 32
  special = false
}

resource "google_secret_manager_secret" "db_admin_password" {
  project   = var.project_id
  secret_id = local.db_admin_secret
  labels    = var.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.this]
}

resource "google_secret_manager_secret_version" "db_admin_password" {
  secret                 = google_secret_manager_secret.db_admin_password.id
  secret_data_wo         = ephemeral.random_password.db_admin.result
  secret_data_wo_version = var.cloudsql.admin_password_version
}

module "cloudsql" {
  source = "../cloudsql"

  project_id          = var.project_id
  region              = var.region
  name                = var.name_prefix
  deletion_protection = var.cloudsql.deletion_protection
  labels              = var.labels
  instance = {
    tier              = var.cloudsql.tier
    availability_type = var.cloudsql.availability_type
    disk_size_gb      = var.cloudsql.disk_size_gb
    max_connections   = var.cloudsql.max_connections
  }
  backup = {
    retained_backups               = var.cloudsql.retained_backups
    point_in_time_recovery_enabled = var.cloudsql.point_in_time_recovery_enabled
    transaction_log_retention_days = var.cloudsql.transaction_log_retention_days
  }
  network = {
    private_network = var.cloudsql.private_network
  }
  iam_service_accounts = module.iam.cloudsql_accounts
  admin = {
    name             = local.db_admin_user
    password_version = var.cloudsql.admin_password_version
  }
  admin_password = ephemeral.random_password.db_admin.result

  depends_on = [google_project_service.this]
}

module "firestore" {
  source = "../firestore"

  project_id        = var.project_id
  location_id       = var.firestore_location
  delete_protection = var.deletion_protection
  kv_collection     = local.kv_collection

  depends_on = [google_project_service.this]
}

# Each secret a role's environment names (roles.<role>.secret_env) is readable by that role's account,
# and by no other. Cloud Run refuses a revision whose account cannot read a secret its environment
# names, so the services and functions are created after these grants (their depends_on).
resource "google_secret_manager_secret_iam_member" "secret_env" {
  for_each = {
    for pair in distinct(flatten([for r in local.roles : [for ref in values(var.roles[r].secret_env) : { role = r, secret = ref.secret }]])) :
    "${pair.role}/${pair.secret}" => pair
  }

  project   = var.project_id
  secret_id = each.value.secret # an id, or projects/<p>/secrets/<id>: both are accepted
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${module.iam.role_emails[each.value.role]}"
}

# Every service of a role deployed on Cloud Run (the default; functions.tf has the others).
module "service" {
  source   = "../cloud_run_service"
  for_each = local.run_services

  project_id            = var.project_id
  region                = var.region
  name                  = each.value.name
  role                  = each.value.role
  stack                 = var.name_prefix
  image                 = var.image
  service_account_email = module.iam.role_emails[each.value.role]
  env                   = local.service_env[each.key]
  secret_env            = var.roles[each.value.role].secret_env
  ingress               = var.roles[each.value.role].ingress
  allow_unauthenticated = each.value.role == "ingress"
  invokers              = module.iam.invokers[each.value.role]
  developers            = ["serviceAccount:${module.iam.deployer_email}"]
  vpc_access            = contains(local.control_plane, each.value.role) ? var.vpc_access : null
  deletion_protection   = var.deletion_protection
  labels                = var.labels
  # The drainer's /api/spool/* comes forwarded by the control plane with the operator's own ID token,
  # minted for the control plane's URL: Cloud Run's invoker check must accept that audience too.
  custom_audiences = each.value.role == "spool_drainer" ? compact([try(local.url["execute"], "")]) : []
  scaling = {
    min_instances   = var.roles[each.value.role].min_instances
    max_instances   = var.roles[each.value.role].max_instances
    concurrency     = var.roles[each.value.role].concurrency
    timeout_seconds = var.roles[each.value.role].timeout_seconds
  }
  resources = {
    cpu      = var.roles[each.value.role].cpu
    memory   = var.roles[each.value.role].memory
    cpu_idle = var.roles[each.value.role].cpu_idle
  }
  # Every service answers GET /healthz once its app is built; the subscription runtime's loop is
  # also watched by a liveness probe (its health server runs beside the loop).
  probes = {
    path     = local.routes.health.path
    liveness = each.value.role == "subscription_runtime"
  }

  depends_on = [google_project_service.this, module.cloudsql, google_secret_manager_secret_iam_member.secret_env]
}

# `noetl-cloud db upgrade`, run by Cloud Build after each image push, as the schema owner.
resource "google_cloud_run_v2_job" "migrate" {
  project             = var.project_id
  location            = var.region
  name                = "${var.name_prefix}-migrate"
  labels              = var.labels
  deletion_protection = var.deletion_protection

  template {
    task_count = 1

    template {
      service_account = module.iam.migrate_email
      max_retries     = 0
      timeout         = "600s"

      dynamic "vpc_access" {
        for_each = var.vpc_access == null ? [] : [var.vpc_access]
        content {
          egress = vpc_access.value.egress
          network_interfaces {
            network    = vpc_access.value.network
            subnetwork = vpc_access.value.subnetwork
          }
        }
      }

      containers {
        image = var.image
        # The schema access a new instance needs (idempotent: noetl_cloud.dbaccess), then the upgrade.
        command = ["/bin/sh", "-c"]
        args    = ["python -m noetl_cloud.dbaccess && exec noetl-cloud db upgrade"]

        dynamic "env" {
          for_each = merge(local.common_env, local.database_env, {
            NOETL_ROLE    = "migrate"
            NOETL_DB_USER = trimsuffix(module.iam.migrate_email, ".gserviceaccount.com")
            # migrate_connections of the connection budget (modules/sizing).
            NOETL_DB_POOL_SIZE    = tostring(local.migrate_connections)
            NOETL_DB_MAX_OVERFLOW = "0"
            NOETL_DB_ADMIN_USER   = module.cloudsql.admin_user
            # The control-plane roles' IAM database users: data access to what the job creates.
            NOETL_DB_RUNTIME_USERS = join(",", [for r in sort(tolist(local.control_plane)) : trimsuffix(module.iam.role_emails[r], ".gserviceaccount.com")])
          })
          content {
            name  = env.key
            value = env.value
          }
        }

        env {
          name = "NOETL_DB_ADMIN_PASSWORD"
          value_source {
            secret_key_ref {
              secret  = google_secret_manager_secret.db_admin_password.secret_id
              version = "latest"
            }
          }
        }
      }
    }
  }

  lifecycle {
    ignore_changes = [
      template[0].template[0].containers[0].image,
      client,
      client_version,
    ]
  }

  # Cloud Run refuses a job whose account cannot read a secret its environment names: the migrate
  # account's access to the admin password (modules/iam, migrate_db_admin) is made first, or a first
  # apply fails at random with "Permission denied on secret".
  depends_on = [google_project_service.this, module.cloudsql, google_secret_manager_secret_version.db_admin_password, module.iam]
}

# The deployer updates the job's image and executes it (cloudbuild.yaml), on this job only.
resource "google_cloud_run_v2_job_iam_member" "deployer" {
  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_job.migrate.name
  role     = "roles/run.developer"
  member   = "serviceAccount:${module.iam.deployer_email}"
}

module "scheduler" {
  source = "../scheduler"

  project_id            = var.project_id
  region                = var.region
  service_account_email = module.iam.scheduler_email
  jobs                  = local.scheduler_jobs

  depends_on = [google_project_service.this, module.service, module.function]
}
