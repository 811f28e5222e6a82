resource "google_cloud_run_v2_service" "this" {
  project  = var.project_id
  location = var.region
  name     = var.name
  ingress  = var.ingress
  # noetl-stack and noetl-role let Cloud Build find every service of a role (a worker per pool, a
  # runtime per subscription) to roll out a new image.
  labels              = merge(var.labels, { "noetl-stack" = var.stack, "noetl-role" = replace(var.role, "_", "-") })
  deletion_protection = var.deletion_protection
  custom_audiences    = var.custom_audiences

  template {
    service_account                  = var.service_account_email
    max_instance_request_concurrency = var.scaling.concurrency
    timeout                          = "${var.scaling.timeout_seconds}s"

    scaling {
      min_instance_count = var.scaling.min_instances
      max_instance_count = var.scaling.max_instances
    }

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

      resources {
        limits = {
          cpu    = var.resources.cpu
          memory = var.resources.memory
        }
        cpu_idle          = var.resources.cpu_idle
        startup_cpu_boost = var.resources.startup_cpu_boost
      }

      # The start command answers GET <probes.path> once the role's app is built (a missing setting
      # fails the start probe, so a misconfigured revision never takes traffic).
      startup_probe {
        initial_delay_seconds = 0
        period_seconds        = var.probes.period_seconds
        timeout_seconds       = min(3, var.probes.period_seconds)
        failure_threshold     = var.probes.startup_failure_threshold
        http_get {
          path = var.probes.path
        }
      }

      dynamic "liveness_probe" {
        for_each = var.probes.liveness ? [var.probes.path] : []
        content {
          period_seconds    = 30
          timeout_seconds   = 5
          failure_threshold = 3
          http_get {
            path = liveness_probe.value
          }
        }
      }

      env {
        name  = "NOETL_ROLE"
        value = var.role
      }

      dynamic "env" {
        for_each = var.env
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "env" {
        for_each = var.secret_env
        content {
          name = env.key
          value_source {
            secret_key_ref {
              secret  = env.value.secret
              version = env.value.version
            }
          }
        }
      }
    }
  }

  lifecycle {
    # Cloud Build rolls out each new image; Terraform owns everything else.
    ignore_changes = [
      template[0].containers[0].image,
      client,
      client_version,
    ]
  }
}

resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = var.invokers

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.this.name
  role     = "roles/run.invoker"
  member   = each.value
}

# Who may roll out revisions of this service (the Cloud Build deployer): run.developer here, not on the project.
resource "google_cloud_run_v2_service_iam_member" "developer" {
  for_each = var.developers

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.this.name
  role     = "roles/run.developer"
  member   = each.value
}

resource "google_cloud_run_v2_service_iam_member" "public" {
  count = var.allow_unauthenticated ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.this.name
  role     = "roles/run.invoker"
  member   = "allUsers"
}
