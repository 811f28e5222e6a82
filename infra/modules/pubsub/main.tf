locals {
  # The Pub/Sub service agent moves undeliverable messages to the dead-letter topics.
  pubsub_agent = var.service_agent_member

  # Every push subscription, keyed by the topic it reads: one per pool, and the events stream. Built
  # from variables only (topic names, not the topics' attributes): every for_each over it is known
  # at plan; the subscriptions wait for the topics through depends_on.
  push = merge(
    {
      for pool, p in var.pools : "${var.command_topic_prefix}${pool}" => {
        topic                 = "${var.command_topic_prefix}${pool}"
        push_endpoint         = p.push_endpoint
        audience              = p.audience
        ordered               = false
        ack_deadline_seconds  = coalesce(p.ack_deadline_seconds, var.delivery.ack_deadline_seconds)
        max_delivery_attempts = coalesce(p.max_delivery_attempts, var.delivery.max_delivery_attempts)
      } if p.push_endpoint != null
    },
    {
      for topic, e in { (var.events_topic) = var.events_push } : topic => {
        topic                              = var.events_topic
        push_endpoint                      = e.push_endpoint
        audience                           = e.audience
        ordered                            = true
        ack_deadline_seconds               = coalesce(e.ack_deadline_seconds, var.delivery.ack_deadline_seconds)
        max_delivery_attempts              = var.delivery.max_delivery_attempts
      } if e != null
    },
  )
}

resource "google_pubsub_topic" "command" {
  for_each = var.pools

  project                    = var.project_id
  name                       = "${var.command_topic_prefix}${each.key}"
  kms_key_name               = var.kms_key_name
  labels                     = var.labels
  message_retention_duration = var.delivery.message_retention_duration
}

resource "google_pubsub_topic" "events" {
  project                    = var.project_id
  name                       = var.events_topic
  kms_key_name               = var.kms_key_name
  labels                     = var.labels
  message_retention_duration = var.delivery.message_retention_duration
}

resource "google_pubsub_topic" "dead_letter" {
  for_each = local.push

  project      = var.project_id
  name         = "${each.key}-dead-letter"
  kms_key_name = var.kms_key_name
  labels       = var.labels
}

# Dead letters are kept where an operator can read them (and replay them by republishing).
resource "google_pubsub_subscription" "dead_letter" {
  for_each = local.push

  project                    = var.project_id
  name                       = "${each.key}-dead-letter"
  topic                      = google_pubsub_topic.dead_letter[each.key].id
  labels                     = var.labels
  ack_deadline_seconds       = 60
  message_retention_duration = var.delivery.dead_letter_retention
  retain_acked_messages      = false

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "push" {
  for_each = local.push

  project                    = var.project_id
  name                       = "${each.key}-push"
  topic                      = each.value.topic
  labels                     = var.labels
  ack_deadline_seconds       = each.value.ack_deadline_seconds
  message_retention_duration = var.delivery.message_retention_duration
  enable_message_ordering    = each.value.ordered

  push_config {
    push_endpoint = each.value.push_endpoint

    oidc_token {
      service_account_email = var.push_service_account_email
      audience              = each.value.audience
    }
  }

  retry_policy {
    minimum_backoff = var.delivery.minimum_backoff
    maximum_backoff = var.delivery.maximum_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[each.key].id
    max_delivery_attempts = each.value.max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_pubsub_topic.command,
    google_pubsub_topic.events,
    google_pubsub_topic_iam_member.dead_letter_publisher,
  ]
}

# What dead-lettering needs: the service agent publishes to the dead-letter topic and
# acknowledges the forwarded message on the source subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  for_each = local.push

  project = var.project_id
  topic   = google_pubsub_topic.dead_letter[each.key].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  for_each = local.push

  project      = var.project_id
  subscription = google_pubsub_subscription.push[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}
