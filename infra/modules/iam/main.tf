locals {
  # Who holds what (docs/deploy.md explains each grant). Filtered to the roles deployed.
  control_plane = setintersection(var.roles, ["execute", "frames", "projector"])
  # execute: the downstream circuits of subscriptions, fed by the executions it ends (docs/spool.md).
  firestore_users = setintersection(var.roles, ["execute", "ingress", "spool_drainer", "subscription_runtime"])
  spool_users     = setintersection(var.roles, ["ingress", "spool_drainer", "subscription_runtime"])
  payload_writers = setintersection(var.roles, ["worker"])
  payload_readers = setintersection(var.roles, ["execute"]) # the console's payload previews (read only)
  publishers      = setintersection(var.roles, ["execute"])
  secret_readers  = setintersection(var.roles, ["execute"])
  source_pullers  = setintersection(var.roles, ["subscription_runtime"])
  tick_pullers    = setintersection(var.roles, ["execute"]) # scheduled subscriptions' polls

  # Every identity's email is built from its account id and the project, not read back from the
  # created account: Terraform knows it at plan, so the for_each of every grant (and of the Cloud SQL
  # users and the Cloud Run invokers, keyed by these) is known on a first plan over an empty project
  # (tests/unit/test_infra.py, the plan-known check). Grants that name an account this way declare
  # depends_on the account, so they are made after it.
  account_ids = merge(
    { for r in var.roles : r => "${var.name_prefix}-${replace(r, "_", "-")}" },
    {
      push      = "${var.name_prefix}-pubsub-push"
      scheduler = "${var.name_prefix}-scheduler"
      migrate   = "${var.name_prefix}-migrate"
      deployer  = "${var.name_prefix}-deployer"
    },
  )
  emails = { for k, id in local.account_ids : k => "${id}@${var.project_id}.iam.gserviceaccount.com" }

  role_members = { for r in var.roles : r => "serviceAccount:${local.emails[r]}" }
  push_member  = "serviceAccount:${local.emails.push}"
  sched_member = "serviceAccount:${local.emails.scheduler}"

  # The caller roles of each service: run.invoker on its Cloud Run services goes to exactly their
  # members, and its app maps each member's email to its role (NOETL_INTERNAL_API_CALLERS,
  # <role>=<email>), whose routes noetl_cloud.auth.roles.POLICY lists (tests/unit/test_roles.py checks
  # that this map and the policy agree). ingress is public (allUsers, set by the stack on that one
  # service); subscription_runtime is called by no one. The Pub/Sub push identity (pubsub_push) appears
  # only under worker and projector, whose push endpoints (POST /) verify it; the scheduler only under
  # the services its jobs call (execute: outbox sweep, command reaper, retention, scheduled
  # executions; frames: the reaper; projector: the catch-up; spool_drainer: the drain). The deployer
  # smoke-tests execute after a rollout (GET /api/catalog); it can already run any image as execute's
  # account, so this gives it nothing new. The drainer asks itself to drain when a circuit closes.
  service_callers = {
    execute              = ["ingress", "worker", "spool_drainer", "subscription_runtime", "scheduler", "operator", "deployer"]
    frames               = ["worker", "scheduler"]
    worker               = ["pubsub_push"]
    projector            = ["pubsub_push", "scheduler", "operator"]
    spool_drainer        = ["ingress", "subscription_runtime", "spool_drainer", "scheduler", "operator"]
    subscription_runtime = []
    ingress              = []
  }

  # The IAM members holding each caller role (a role not deployed has none).
  caller_members = merge(
    { for r in ["ingress", "worker", "spool_drainer", "subscription_runtime"] : r => contains(var.roles, r) ? [local.role_members[r]] : [] },
    {
      scheduler   = [local.sched_member]
      operator    = sort(tolist(var.operators))
      deployer    = ["serviceAccount:${local.emails.deployer}"]
      pubsub_push = [local.push_member]
    },
  )

  # The callers of each service, as IAM members (its run.invoker grants).
  callers = { for s, caller_roles in local.service_callers : s => flatten([for r in caller_roles : local.caller_members[r]]) }

  # The ID-token allowlist of each internal API (/api/*, /drain), as <role>=<email> entries: its
  # callers less the push identity, whose tokens only the push endpoints (POST /) accept.
  api_callers = {
    for s in ["execute", "frames", "projector", "spool_drainer"] : s => flatten([
      for r in local.service_callers[s] : [for m in local.caller_members[r] : "${r}=${split(":", m)[1]}"] if r != "pubsub_push"
    ])
  }

  cloudsql_condition = {
    title      = "noetl-instance-only"
    expression = "resource.name == \"projects/${var.project_id}/instances/${var.resources.cloudsql_instance}\" && resource.service == \"sqladmin.googleapis.com\""
  }
  firestore_condition = {
    title      = "noetl-firestore-database-only"
    expression = "resource.name == \"projects/${var.project_id}/databases/${var.resources.firestore_database}\""
  }

  cloudsql_members = merge(
    { for r in local.control_plane : r => local.role_members[r] },
    { migrate = "serviceAccount:${local.emails.migrate}" },
  )
  # The accounts whose revisions the deployer rolls out (actAs), as service account resource names.
  runtime_accounts = {
    for k in concat(tolist(var.roles), ["migrate"]) : k => "projects/${var.project_id}/serviceAccounts/${local.emails[k]}"
  }
}

# -- identities ------------------------------------------------------------------------------------

resource "google_service_account" "role" {
  for_each = var.roles

  project      = var.project_id
  account_id   = local.account_ids[each.key]
  display_name = "NoETL ${each.key}"
  description  = "Runtime identity of the NoETL ${each.key} Cloud Run service."
}

resource "google_service_account" "push" {
  project      = var.project_id
  account_id   = local.account_ids.push
  display_name = "NoETL Pub/Sub push"
  description  = "OIDC identity of the Pub/Sub push subscriptions; may invoke only worker and projector."
}

resource "google_service_account" "scheduler" {
  project      = var.project_id
  account_id   = local.account_ids.scheduler
  display_name = "NoETL Cloud Scheduler"
  description  = "OIDC identity of the scheduled jobs (reaper, outbox sweep, drainer, scheduled subscriptions)."
}

resource "google_service_account" "migrate" {
  project      = var.project_id
  account_id   = local.account_ids.migrate
  display_name = "NoETL migrations"
  description  = "Runs noetl-cloud db upgrade as a Cloud Run job; owns the schema."
}

resource "google_service_account" "deployer" {
  project      = var.project_id
  account_id   = local.account_ids.deployer
  display_name = "NoETL Cloud Build deployer"
  description  = "Cloud Build identity: pushes the image, runs the migration job, rolls out new revisions."
}

# -- Cloud SQL: control-plane roles and the migration job only ------------------------------------

resource "google_project_iam_member" "cloudsql_client" {
  for_each = local.cloudsql_members

  project = var.project_id
  role    = "roles/cloudsql.client"
  member  = each.value

  condition {
    title      = local.cloudsql_condition.title
    expression = local.cloudsql_condition.expression
  }

  depends_on = [google_service_account.role, google_service_account.migrate]
}

resource "google_project_iam_member" "cloudsql_instance_user" {
  for_each = local.cloudsql_members

  project = var.project_id
  role    = "roles/cloudsql.instanceUser"
  member  = each.value

  condition {
    title      = local.cloudsql_condition.title
    expression = local.cloudsql_condition.expression
  }

  depends_on = [google_service_account.role, google_service_account.migrate]
}

# -- Firestore: coordination state (circuits, leases, replay protection) --------------------------

# Conditioned on the one database: the grant does not reach any other Firestore database of the project.
resource "google_project_iam_member" "datastore_user" {
  for_each = local.firestore_users

  project = var.project_id
  role    = "roles/datastore.user"
  member  = local.role_members[each.key]

  condition {
    title      = local.firestore_condition.title
    expression = local.firestore_condition.expression
  }

  depends_on = [google_service_account.role]
}

# -- Pub/Sub: execute publishes commands and mirrors events; the runtime pulls user sources -------

resource "google_pubsub_topic_iam_member" "command_publisher" {
  for_each = { for pair in setproduct(local.publishers, keys(var.resources.command_topics)) : "${pair[0]}/${pair[1]}" => pair }

  project = var.project_id
  topic   = var.resources.command_topics[each.value[1]]
  role    = "roles/pubsub.publisher"
  member  = local.role_members[each.value[0]]

  depends_on = [google_service_account.role]
}

resource "google_pubsub_topic_iam_member" "events_publisher" {
  for_each = local.publishers

  project = var.project_id
  topic   = var.resources.events_topic
  role    = "roles/pubsub.publisher"
  member  = local.role_members[each.key]

  depends_on = [google_service_account.role]
}

resource "google_pubsub_subscription_iam_member" "source_subscriber" {
  for_each = { for pair in setproduct(local.source_pullers, var.resources.source_subscriptions) : "${pair[0]}/${pair[1]}" => pair }

  project      = var.project_id
  subscription = each.value[1]
  role         = "roles/pubsub.subscriber"
  member       = local.role_members[each.value[0]]

  depends_on = [google_service_account.role]
}

# The execute role's subscription tick polls the sources of activation: scheduled subscriptions.
resource "google_pubsub_subscription_iam_member" "scheduled_source_subscriber" {
  for_each = { for pair in setproduct(local.tick_pullers, var.resources.scheduled_sources) : "${pair[0]}/${pair[1]}" => pair }

  project      = var.project_id
  subscription = each.value[1]
  role         = "roles/pubsub.subscriber"
  member       = local.role_members[each.value[0]]

  depends_on = [google_service_account.role]
}

# Projects created before 2021-04-08: the Pub/Sub service agent mints the push OIDC tokens.
resource "google_service_account_iam_member" "push_token_creator" {
  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = var.pubsub_service_agent

  depends_on = [google_service_account.push]
}

# -- Cloud Storage: spool and payload buckets ----------------------------------------------------

resource "google_storage_bucket_iam_member" "spool_user" {
  for_each = local.spool_users

  bucket = var.resources.spool_bucket
  role   = "roles/storage.objectUser"
  member = local.role_members[each.key]

  depends_on = [google_service_account.role]
}

# Retention (execute) writes and reads the archive of expired executions.
resource "google_storage_bucket_iam_member" "archive_writer" {
  for_each = local.publishers

  bucket = var.resources.archive_bucket
  role   = "roles/storage.objectUser"
  member = local.role_members[each.key]

  depends_on = [google_service_account.role]
}

resource "google_storage_bucket_iam_member" "payload_writer" {
  for_each = local.payload_writers

  bucket = var.resources.payload_bucket
  role   = "roles/storage.objectUser"
  member = local.role_members[each.key]

  depends_on = [google_service_account.role]
}

# The console's payload previews (GET /api/executions/{id}/payloads/{sha256}): execute reads, never writes.
resource "google_storage_bucket_iam_member" "payload_reader" {
  for_each = local.payload_readers

  bucket = var.resources.payload_bucket
  role   = "roles/storage.objectViewer"
  member = local.role_members[each.key]

  depends_on = [google_service_account.role]
}

# -- Secret Manager: the wallet is read by the control plane only ---------------------------------

resource "google_secret_manager_secret_iam_member" "webhook_secret_accessor" {
  for_each = { for pair in setproduct(local.secret_readers, var.resources.webhook_secrets) : "${pair[0]}/${pair[1]}" => pair }

  project   = var.project_id
  secret_id = each.value[1]
  role      = "roles/secretmanager.secretAccessor"
  member    = local.role_members[each.value[0]]

  depends_on = [google_service_account.role]
}

# Task credentials: the worker reads the keychain-<alias> secrets, and no other (docs/dsl.md, Credentials).
resource "google_secret_manager_secret_iam_member" "keychain_secret_accessor" {
  for_each = { for pair in setproduct(setintersection(var.roles, ["worker"]), var.resources.keychain_secrets) : "${pair[0]}/${pair[1]}" => pair }

  project   = var.project_id
  secret_id = each.value[1]
  role      = "roles/secretmanager.secretAccessor"
  member    = local.role_members[each.value[0]]

  depends_on = [google_service_account.role]
}

# The migration job connects once per run as the built-in admin user (noetl_cloud.dbaccess).
resource "google_secret_manager_secret_iam_member" "migrate_db_admin" {
  project   = var.project_id
  secret_id = var.resources.db_admin_secret
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${local.emails.migrate}"

  depends_on = [google_service_account.migrate]
}

# -- telemetry: every role writes its spans to Cloud Trace and its metrics to Cloud Monitoring ------

# NOETL_TRACING=cloud / NOETL_METRICS=cloud (docs/observability.md). Both roles are write-only agents
# and exist only at project level.
resource "google_project_iam_member" "telemetry_writer" {
  for_each = { for pair in setproduct(tolist(var.roles), ["roles/cloudtrace.agent", "roles/monitoring.metricWriter"]) : "${pair[0]}/${pair[1]}" => pair }

  project = var.project_id
  role    = each.value[1]
  member  = local.role_members[each.value[0]]

  depends_on = [google_service_account.role]
}

# -- the Cloud Build deployer --------------------------------------------------------------------

# Project-wide only what cannot be granted on one resource: reading Cloud Run (listing the services
# of the stack, following operations and executions) and writing the build's logs. Changing a
# service or the migration job is granted on each of them (run.developer: modules/cloud_run_service
# and the stack's migrate job), never on the project.
resource "google_project_iam_member" "deployer" {
  for_each = toset(["roles/run.viewer", "roles/logging.logWriter"])

  project = var.project_id
  role    = each.key
  member  = "serviceAccount:${google_service_account.deployer.email}"
}

# A build run as a user-specified service account reads its uploaded source as that account
# (gcloud builds submit --gcs-source-staging-dir gs://<this bucket>/source): read, on this bucket only.
resource "google_storage_bucket_iam_member" "deployer_source_reader" {
  bucket = var.resources.build_source_bucket
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.deployer.email}"
}

resource "google_artifact_registry_repository_iam_member" "deployer_writer" {
  project    = var.project_id
  location   = var.resources.artifact_registry.location
  repository = var.resources.artifact_registry.repository
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.deployer.email}"
}

# Deploying a revision that runs as a service account needs actAs on that account (and no other).
resource "google_service_account_iam_member" "deployer_act_as" {
  for_each = local.runtime_accounts

  service_account_id = each.value
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.deployer.email}"

  depends_on = [google_service_account.role, google_service_account.migrate]
}
