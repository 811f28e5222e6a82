provider "google" {
  project = var.project_id
  region  = var.region

  default_labels = {
    app         = "noetl"
    environment = "dev"
  }
}

provider "google-beta" {
  project = var.project_id
  region  = var.region

  default_labels = {
    app         = "noetl"
    environment = "dev"
  }
}

module "noetl" {
  source = "../../modules/stack"

  project_id              = var.project_id
  region                  = var.region
  firestore_location      = var.firestore_location
  image                   = var.image
  roles                   = var.roles
  pools                   = var.pools
  webhook_secrets         = var.webhook_secrets
  keychain_secrets        = var.keychain_secrets
  runtime_subscriptions   = var.runtime_subscriptions
  operators               = var.operators
  scheduled_subscriptions = var.scheduled_subscriptions
  scheduled_sources       = var.scheduled_sources
  build_trigger           = var.build_trigger

  alerts = {
    notification_channels = var.notification_channels
  }

  tenant = {
    log_level = "DEBUG"
  }

  # A small zonal instance with a public IP that only the Cloud SQL connector can use (no
  # authorized networks), and everything destroyable.
  cloudsql = {
    tier                           = "db-custom-1-3840"
    availability_type              = "ZONAL"
    retained_backups               = 7
    point_in_time_recovery_enabled = true
    deletion_protection            = false
  }

  buckets = {
    spool_dead_letter_days = 14
    payload_delete_days    = 30
    archive_delete_days    = 60
    force_destroy          = true
  }

  deletion_protection = false
}
