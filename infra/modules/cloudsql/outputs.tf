output "instance_name" {
  description = "Instance name."
  value       = google_sql_database_instance.this.name
}

output "connection_name" {
  description = "project:region:instance, for NOETL_CLOUDSQL_INSTANCE."
  value       = google_sql_database_instance.this.connection_name
}

output "database" {
  description = "Database name, for NOETL_DB_NAME."
  value       = google_sql_database.noetl.name
}

output "iam_users" {
  description = "Database user name of each IAM service account, keyed by email (NOETL_DB_USER)."
  value       = { for email, user in google_sql_user.iam : email => user.name }
}

output "ip_type" {
  description = "NOETL_CLOUDSQL_IP_TYPE that matches the connectivity of the instance."
  value       = var.network.private_network == null ? "public" : "private"
}

output "admin_user" {
  description = "Name of the built-in admin user (NOETL_DB_ADMIN_USER of the migration job)."
  value       = google_sql_user.admin.name
}
