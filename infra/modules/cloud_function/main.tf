# One NoETL HTTP role as a 2nd-gen Cloud Function, from the same source as the image: the role's
# functions/<role>/main.py (entry point: the function named after the role), the shared package and
# the image's locked requirements (functions/package_function.py). A 2nd-gen function runs as a
# Cloud Run service of the same name, so invoker grants and URLs are Cloud Run's (docs/deploy.md,
# "Cloud Functions").

locals {
  ingress_settings = {
    INGRESS_TRAFFIC_ALL                    = "ALLOW_ALL"
    INGRESS_TRAFFIC_INTERNAL_ONLY          = "ALLOW_INTERNAL_ONLY"
    INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER = "ALLOW_INTERNAL_AND_GCLB"
  }
}

resource "google_cloudfunctions2_function" "this" {
  project     = var.project_id
  location    = var.region
  name        = var.name
  description = "NoETL ${var.role} (functions/${var.role}/main.py)."
  # noetl-stack and noetl-function let Cloud Build find the functions of a role to roll out a new
  # source; not noetl-role, which selects the Cloud Run services it updates by image.
  labels = merge(var.labels, { "noetl-stack" = var.stack, "noetl-function" = replace(var.role, "_", "-") })

  build_config {
    runtime           = var.runtime
    entry_point       = var.role
    service_account   = "projects/${var.project_id}/serviceAccounts/${var.build_service_account_email}"
    docker_repository = var.docker_repository

    source {
      storage_source {
        bucket = var.source_archive.bucket
        object = var.source_archive.object
      }
    }
  }

  service_config {
    service_account_email            = var.service_account_email
    ingress_settings                 = local.ingress_settings[var.ingress]
    min_instance_count               = var.scaling.min_instances
    max_instance_count               = var.scaling.max_instances
    max_instance_request_concurrency = var.scaling.concurrency
    timeout_seconds                  = var.scaling.timeout_seconds
    available_cpu                    = var.resources.cpu
    available_memory                 = var.resources.memory
    all_traffic_on_latest_revision   = true
    vpc_connector                    = var.vpc_connector
    vpc_connector_egress_settings    = var.vpc_connector == null ? null : "PRIVATE_RANGES_ONLY"
    environment_variables            = merge(var.env, { NOETL_ROLE = var.role })

    dynamic "secret_environment_variables" {
      for_each = var.secret_env
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret
        version    = secret_environment_variables.value.version
      }
    }
  }

  lifecycle {
    # Cloud Build rolls out each new source (gcloud functions deploy --source); Terraform owns the rest.
    ignore_changes = [build_config[0].source]
  }
}

resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = var.invokers

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.this.name
  role     = "roles/run.invoker"
  member   = each.value
}

resource "google_cloud_run_v2_service_iam_member" "public" {
  count = var.allow_unauthenticated ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.this.name
  role     = "roles/run.invoker"
  member   = "allUsers"
}

# Who may deploy new sources of this function (the Cloud Build deployer): here, not on the project.
resource "google_cloudfunctions2_function_iam_member" "developer" {
  for_each = var.developers

  project        = var.project_id
  location       = var.region
  cloud_function = google_cloudfunctions2_function.this.name
  role           = "roles/cloudfunctions.developer"
  member         = each.value
}
