resource "google_sql_database_instance" "this" {
  project             = var.project_id
  region              = var.region
  name                = var.name
  database_version    = "POSTGRES_15"
  deletion_protection = var.deletion_protection

  settings {
    tier                        = var.instance.tier
    edition                     = var.instance.edition
    availability_type           = var.instance.availability_type
    disk_size                   = var.instance.disk_size_gb
    disk_autoresize             = var.instance.disk_autoresize
    deletion_protection_enabled = var.deletion_protection
    user_labels                 = var.labels

    ip_configuration {
      ipv4_enabled       = var.network.private_network == null
      private_network    = var.network.private_network
      allocated_ip_range = var.network.allocated_range
      ssl_mode           = "ENCRYPTED_ONLY"
    }

    database_flags {
      name  = "cloudsql.iam_authentication"
      value = "on"
    }

    database_flags {
      name  = "max_connections"
      value = tostring(var.instance.max_connections)
    }

    backup_configuration {
      enabled                        = var.backup.enabled
      start_time                     = var.backup.start_time
      point_in_time_recovery_enabled = var.backup.point_in_time_recovery_enabled
      transaction_log_retention_days = var.backup.transaction_log_retention_days

      backup_retention_settings {
        retained_backups = var.backup.retained_backups
        retention_unit   = "COUNT"
      }
    }

    maintenance_window {
      day          = var.maintenance_window.day
      hour         = var.maintenance_window.hour
      update_track = "stable"
    }

    insights_config {
      query_insights_enabled  = true
      record_application_tags = false
      record_client_address   = false
    }
  }
}

resource "google_sql_database" "noetl" {
  project  = var.project_id
  instance = google_sql_database_instance.this.name
  name     = var.database
}

# IAM database authentication: the user name of a service account is its email without
# ".gserviceaccount.com"; the Cloud SQL connector logs in with a short-lived OAuth token. Keyed by
# role (google_sql_user.iam["execute"]): the keys are known at plan.
resource "google_sql_user" "iam" {
  for_each = var.iam_service_accounts

  project  = var.project_id
  instance = google_sql_database_instance.this.name
  name     = trimsuffix(each.value, ".gserviceaccount.com")
  type     = "CLOUD_IAM_SERVICE_ACCOUNT"
}

# A built-in user (a member of cloudsqlsuperuser) for the one thing IAM users cannot do for
# themselves: let the schema owner create in the public schema and the runtime roles use it
# (noetl_cloud.dbaccess, run by the migration job). Its password is write-only: Terraform sends it
# to the API and keeps neither it nor a hash in the state; a new password_version sends a new one.
resource "google_sql_user" "admin" {
  project             = var.project_id
  instance            = google_sql_database_instance.this.name
  name                = var.admin.name
  type                = "BUILT_IN"
  password_wo         = var.admin_password
  password_wo_version = var.admin.password_version
}
