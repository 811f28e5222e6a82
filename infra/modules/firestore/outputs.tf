output "name" {
  description = "Database id."
  value       = google_firestore_database.this.name
}

output "id" {
  description = "Database resource id (projects/<p>/databases/<d>)."
  value       = google_firestore_database.this.id
}
