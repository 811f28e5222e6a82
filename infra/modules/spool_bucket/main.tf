resource "google_storage_bucket" "this" {
  project       = var.project_id
  name          = var.name
  location      = var.location
  storage_class = var.storage_class
  labels        = var.labels
  force_destroy = var.force_destroy

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = var.versioning
  }

  lifecycle_rule {
    condition {
      # Dead letters (<subscription>/dlq/...) are written with customTime; live items carry none.
      days_since_custom_time = var.lifecycle_policy.dead_letter_age_days
    }
    action {
      type = "Delete"
    }
  }

  dynamic "lifecycle_rule" {
    for_each = var.lifecycle_policy.delete_after_days == null ? [] : [var.lifecycle_policy.delete_after_days]
    content {
      condition {
        age = lifecycle_rule.value
      }
      action {
        type = "Delete"
      }
    }
  }

  dynamic "lifecycle_rule" {
    for_each = var.lifecycle_policy.coldline_after_days == null ? [] : [var.lifecycle_policy.coldline_after_days]
    content {
      condition {
        age                   = lifecycle_rule.value
        matches_storage_class = ["STANDARD"]
      }
      action {
        type          = "SetStorageClass"
        storage_class = "COLDLINE"
      }
    }
  }

  dynamic "encryption" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      default_kms_key_name = encryption.value
    }
  }
}
