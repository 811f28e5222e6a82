output "command_topics" {
  description = "Command topic of each pool: name and id."
  value       = { for pool, t in google_pubsub_topic.command : pool => { name = t.name, id = t.id } }
}

output "command_topic_names" {
  description = "Command topic name of each pool, built from the prefix (known at plan: other modules key grants by it); read after the topics exist."
  value       = { for pool in keys(var.pools) : pool => "${var.command_topic_prefix}${pool}" }
  depends_on  = [google_pubsub_topic.command]
}

output "events_topic" {
  description = "The events topic: name and id."
  value       = { name = google_pubsub_topic.events.name, id = google_pubsub_topic.events.id }
}

output "push_subscriptions" {
  description = "Push subscription name of each topic."
  value       = { for topic, s in google_pubsub_subscription.push : topic => s.name }
}

output "dead_letter_subscriptions" {
  description = "Dead-letter subscription name of each topic."
  value       = { for topic, s in google_pubsub_subscription.dead_letter : topic => s.name }
}

output "pubsub_service_agent" {
  description = "The project's Pub/Sub service agent (IAM member)."
  value       = local.pubsub_agent
}
