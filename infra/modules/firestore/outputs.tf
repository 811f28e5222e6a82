output "name" {
  description = "Database id."
  value       = google_firestore_database.this.name
}

output "id" {
  description = "Database resource id (projects/<p>/databases/<d>)."
  value       = google_firestore_database.this.id
}

output "kv_collection" {
  description = "Collection of the key-value store (NOETL_KV_COLLECTION), with its TTL policy on expires_at."
  value       = var.kv_collection
}
