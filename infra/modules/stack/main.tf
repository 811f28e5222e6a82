# The whole deployment: what ARCHITECTURE.md §3 and §6 describe, composed from the modules.

data "google_project" "this" {
  project_id = var.project_id
}

locals {
  roles          = toset(keys(var.roles))
  service_name   = { for r in local.roles : r => "${var.name_prefix}-${replace(r, "_", "-")}" }
  control_plane  = setintersection(local.roles, ["execute", "frames", "projector"])
  api_clients    = setintersection(local.roles, ["ingress", "worker", "spool_drainer", "subscription_runtime"])
  network_egress = setunion(local.control_plane, ["migrate"])

  # Deterministic Cloud Run URLs (https://<service>-<project number>.<region>.run.app): known at
  # plan time, so the control plane can name its own URL as the audience of its ID tokens, and
  # push subscriptions and scheduler jobs can be planned before the services exist.
  url = { for r in local.roles : r => "https://${local.service_name[r]}-${data.google_project.this.number}.${var.region}.run.app" }

  command_topic_prefix = "${var.name_prefix}-commands-"
  events_topic         = "${var.name_prefix}-events"

  apis = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudscheduler.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "sqladmin.googleapis.com",
    "storage.googleapis.com",
  ])

  # -- environment of each role (every name is a NOETL_ setting: docs/configuration.md) --------
  common_env = {
    NOETL_ENVIRONMENT           = "gcp"
    NOETL_PROJECT_ID            = var.project_id
    NOETL_REGION                = var.region
    NOETL_LOG_LEVEL             = var.tenant.log_level
    NOETL_TENANT_ID             = var.tenant.tenant_id
    NOETL_ORGANIZATION_ID       = var.tenant.organization_id
    NOETL_POOLS                 = join(",", sort(tolist(var.pools)))
    NOETL_EVENTS_TOPIC          = local.events_topic
    NOETL_COMMAND_TOPIC_PREFIX  = local.command_topic_prefix
    NOETL_INTERNAL_API_AUDIENCE = local.url["execute"]
  }
  database_env = {
    NOETL_CLOUDSQL_INSTANCE = module.cloudsql.connection_name
    NOETL_DB_NAME           = module.cloudsql.database
    NOETL_DB_IAM_AUTH       = "true"
    NOETL_CLOUDSQL_IP_TYPE  = module.cloudsql.ip_type
  }
  role_env = {
    for r in local.roles : r => merge(
      local.common_env,
      contains(local.control_plane, r) ? merge(local.database_env, {
        NOETL_DB_USER               = trimsuffix(module.iam.role_emails[r], ".gserviceaccount.com")
        NOETL_INTERNAL_API_CALLERS  = join(",", module.iam.execute_callers)
        NOETL_INTERNAL_API_AUDIENCE = local.url[r]
      }) : {},
      r == "execute" ? {
        NOETL_SECRETS_BACKEND    = "secret_manager"
        NOETL_INGRESS_PRINCIPALS = contains(local.roles, "ingress") ? module.iam.role_emails["ingress"] : ""
      } : {},
      contains(local.api_clients, r) ? { NOETL_API_URL = local.url["execute"] } : {},
      r == "worker" ? {
        # The push subscriptions of every pool sign their OIDC tokens as the push identity, for this URL.
        NOETL_WORKER_PUSH_AUDIENCE        = local.url["worker"]
        NOETL_WORKER_PUSH_SERVICE_ACCOUNT = module.iam.push_email
      } : {},
      contains(["ingress", "spool_drainer", "subscription_runtime"], r) ? {
        NOETL_SPOOL_BACKEND = "gcs"
        NOETL_SPOOL_BUCKET  = module.spool_bucket.name
      } : {},
      r == "ingress" && contains(local.roles, "spool_drainer") ? { NOETL_SPOOL_DRAINER_URL = local.url["spool_drainer"] } : {},
      r == "worker" && contains(local.roles, "frames") ? { NOETL_FRAMES_URL = local.url["frames"] } : {},
      var.roles[r].env,
    )
  }

  scheduler_jobs = merge(
    {
      "${var.name_prefix}-outbox-sweep" = {
        description = "Publish outbox rows whose first publish failed (execute)."
        schedule    = var.maintenance_schedules.outbox_sweep
        uri         = "${local.url["execute"]}/api/internal/outbox/sweep"
        audience    = local.url["execute"]
        body        = "{}"
        time_zone   = "Etc/UTC"
      }
    },
    contains(local.roles, "worker") ? {
      "${var.name_prefix}-command-reaper" = {
        description = "Re-issue commands whose claim lease expired; fail them after their attempts (execute)."
        schedule    = var.maintenance_schedules.command_reaper
        uri         = "${local.url["execute"]}/api/internal/reaper"
        audience    = local.url["execute"]
        body        = "{}"
        time_zone   = "Etc/UTC"
      }
    } : {},
    contains(local.roles, "frames") ? {
      "${var.name_prefix}-frame-reaper" = {
        description = "Release expired frame leases (frames)."
        schedule    = var.maintenance_schedules.frame_reaper
        uri         = "${local.url["frames"]}/api/internal/frames/reap"
        audience    = local.url["frames"]
        body        = "{}"
        time_zone   = "Etc/UTC"
      }
    } : {},
    contains(local.roles, "spool_drainer") ? {
      "${var.name_prefix}-spool-drainer" = {
        description = "Drain spooled items whose downstream circuit has closed (spool_drainer)."
        schedule    = var.maintenance_schedules.drainer
        uri         = "${local.url["spool_drainer"]}/drain"
        audience    = local.url["spool_drainer"]
        body        = "{}"
        time_zone   = "Etc/UTC"
      }
    } : {},
    {
      for name, s in var.scheduled_subscriptions : "${var.name_prefix}-sched-${name}" => {
        description = "Scheduled run of ${s.path}."
        schedule    = s.schedule
        uri         = "${local.url["execute"]}/api/execute"
        audience    = local.url["execute"]
        body        = jsonencode({ path = s.path, workload = jsondecode(s.workload), meta = { scheduled_by = name } })
        time_zone   = s.time_zone
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

module "iam" {
  source = "../iam"

  project_id  = var.project_id
  name_prefix = var.name_prefix
  roles       = local.roles
  resources = {
    cloudsql_instance    = module.cloudsql.instance_name
    command_topics       = { for pool, t in module.pubsub.command_topics : pool => t.name }
    events_topic         = module.pubsub.events_topic.name
    spool_bucket         = module.spool_bucket.name
    payload_bucket       = module.payload_bucket.name
    webhook_secrets      = toset([for s in google_secret_manager_secret.webhook : s.secret_id])
    source_subscriptions = var.source_subscriptions
    artifact_registry = {
      location   = google_artifact_registry_repository.images.location
      repository = google_artifact_registry_repository.images.repository_id
    }
  }

  depends_on = [google_project_service.this]
}

module "pubsub" {
  source = "../pubsub"

  project_id           = var.project_id
  command_topic_prefix = local.command_topic_prefix
  events_topic         = local.events_topic
  labels               = var.labels
  kms_key_name         = null
  pools = {
    for p in var.pools : p => contains(local.roles, "worker") ? {
      push_endpoint = "${local.url["worker"]}${var.roles["worker"].push_path}"
      audience      = local.url["worker"]
      } : {
      push_endpoint = null
      audience      = null
    }
  }
  events_push = contains(local.roles, "projector") ? {
    push_endpoint = "${local.url["projector"]}${var.roles["projector"].push_path}"
    audience      = local.url["projector"]
  } : null
  push_service_account_email = module.iam.push_email

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
  }
  backup = {
    retained_backups               = var.cloudsql.retained_backups
    point_in_time_recovery_enabled = var.cloudsql.point_in_time_recovery_enabled
    transaction_log_retention_days = var.cloudsql.transaction_log_retention_days
  }
  network = {
    private_network = var.cloudsql.private_network
  }
  iam_service_accounts = toset(module.iam.cloudsql_accounts)

  depends_on = [google_project_service.this]
}

module "firestore" {
  source = "../firestore"

  project_id        = var.project_id
  location_id       = var.firestore_location
  delete_protection = var.deletion_protection

  depends_on = [google_project_service.this]
}

module "service" {
  source   = "../cloud_run_service"
  for_each = var.roles

  project_id            = var.project_id
  region                = var.region
  name                  = local.service_name[each.key]
  role                  = each.key
  image                 = var.image
  service_account_email = module.iam.role_emails[each.key]
  env                   = local.role_env[each.key]
  secret_env            = each.value.secret_env
  ingress               = each.value.ingress
  allow_unauthenticated = each.key == "ingress"
  invokers              = module.iam.invokers[each.key]
  vpc_access            = contains(local.control_plane, each.key) ? var.vpc_access : null
  deletion_protection   = var.deletion_protection
  labels                = var.labels
  scaling = {
    min_instances   = each.value.min_instances
    max_instances   = each.value.max_instances
    concurrency     = each.value.concurrency
    timeout_seconds = each.value.timeout_seconds
  }
  resources = {
    cpu      = each.value.cpu
    memory   = each.value.memory
    cpu_idle = each.value.cpu_idle
  }

  depends_on = [google_project_service.this, module.cloudsql]
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
        image   = var.image
        command = ["noetl-cloud"]
        args    = ["db", "upgrade"]

        dynamic "env" {
          for_each = merge(local.common_env, local.database_env, {
            NOETL_ROLE    = "migrate"
            NOETL_DB_USER = trimsuffix(module.iam.migrate_email, ".gserviceaccount.com")
          })
          content {
            name  = env.key
            value = env.value
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

  depends_on = [google_project_service.this, module.cloudsql]
}

module "scheduler" {
  source = "../scheduler"

  project_id            = var.project_id
  region                = var.region
  service_account_email = module.iam.scheduler_email
  jobs                  = local.scheduler_jobs

  depends_on = [google_project_service.this, module.service]
}
