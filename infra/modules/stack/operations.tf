# What a team operating the stack expects beside it (docs/deploy.md, "Alerts" and "Continuous
# deployment"): the alert policies, and a Cloud Build trigger that runs cloudbuild.yaml on every push
# to the deploy branch as the deployer.

module "monitoring" {
  source = "../monitoring"

  project_id            = var.project_id
  name_prefix           = var.name_prefix
  notification_channels = var.alerts.notification_channels
  # Every dead-letter subscription of the command topics and of the events topic (modules/pubsub).
  dead_letter_subscriptions = sort(values(module.pubsub.dead_letter_subscriptions))
  cloudsql = {
    database_id     = "${var.project_id}:${module.cloudsql.instance_name}"
    max_connections = var.cloudsql.max_connections
  }
  runtime_services = sort([for k, s in local.services : s.name if s.role == "subscription_runtime"])
  thresholds       = var.alerts.thresholds
  labels           = var.labels

  depends_on = [google_project_service.this]
}

module "build_trigger" {
  source = "../build_trigger"
  count  = var.build_trigger == null ? 0 : 1

  project_id            = var.project_id
  region                = var.region
  name                  = "${var.name_prefix}-deploy"
  service_account_email = module.iam.deployer_email
  source_repo           = var.build_trigger
  substitutions = {
    _REGION      = var.region
    _REPOSITORY  = google_artifact_registry_repository.images.repository_id
    _NAME_PREFIX = var.name_prefix
  }

  depends_on = [google_project_service.this]
}
