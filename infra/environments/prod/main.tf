provider "google" {
  project = var.project_id
  region  = var.region

  default_labels = {
    app         = "noetl"
    environment = "prod"
  }
}

provider "google-beta" {
  project = var.project_id
  region  = var.region

  default_labels = {
    app         = "noetl"
    environment = "prod"
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
    log_level = "INFO"
  }

  cloudsql = {
    tier                           = "db-custom-2-7680"
    availability_type              = "REGIONAL"
    disk_size_gb                   = 50
    retained_backups               = 30
    point_in_time_recovery_enabled = true
    transaction_log_retention_days = 7
    private_network                = var.private_network
    deletion_protection            = true
  }

  vpc_access = {
    network    = var.private_network
    subnetwork = var.vpc_subnetwork
  }

  buckets = {
    spool_dead_letter_days = 90
    # Payloads: the TTL safety net of payload retention (longer than every retention policy).
    payload_delete_days         = 400
    archive_delete_days         = 730
    archive_coldline_after_days = 30
  }

  deletion_protection = true
}
