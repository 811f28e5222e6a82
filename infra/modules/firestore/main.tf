# Coordination state (circuit breakers, drain and runtime leases, rate buckets, replay protection
# of the ingress): compare-and-set through transactions of a native-mode database.
resource "google_firestore_database" "this" {
  project                           = var.project_id
  name                              = var.database
  location_id                       = var.location_id
  type                              = "FIRESTORE_NATIVE"
  concurrency_mode                  = "PESSIMISTIC"
  app_engine_integration_mode       = "DISABLED"
  point_in_time_recovery_enablement = var.point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  delete_protection_state           = var.delete_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy                   = var.delete_protection ? "ABANDON" : "DELETE"
}

# What shared/noetl_cloud/kv/firestore.py relies on, for its one collection (NOETL_KV_COLLECTION):
# a TTL policy on expires_at, so replay-protection, dedup and lease documents are deleted by
# Firestore after they expire (usually within a day; a null expires_at never expires), and no
# single-field index on the fields that are never queried (the adapter reads documents by id only):
# the value's JSON text (up to 1 MiB, indexed for nothing), the original key, and the two
# timestamps (a monotonically rising indexed timestamp caps the write rate of the collection).
resource "google_firestore_field" "ttl" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = var.kv_collection
  field      = "expires_at"

  ttl_config {}

  # An empty index_config exempts the field from single-field indexing.
  index_config {}
}

resource "google_firestore_field" "not_indexed" {
  for_each = toset(["value_json", "key", "updated_at"])

  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = var.kv_collection
  field      = each.key

  index_config {}

  # One field operation at a time on the collection group.
  depends_on = [google_firestore_field.ttl]
}
