# The HTTP roles deployed as 2nd-gen Cloud Functions (var.roles[*].deployable = "function";
# docs/deploy.md, "Cloud Functions"), from the same source as the image: the archive of each role
# (functions/package_function.py) that every build uploads to the build-source bucket. A 2nd-gen
# function runs as a Cloud Run service of its own name, so it keeps the role's deterministic URL:
# push endpoints, audiences and scheduler targets (local.service_url) are the same either way.

locals {
  run_services      = { for k, s in local.services : k => s if var.roles[s.role].deployable == "run" }
  function_services = { for k, s in local.services : k => s if var.roles[s.role].deployable == "function" }
  # Where cloudbuild.yaml's package-functions step puts each role's archive (first build: this name).
  function_source_object = "functions/%s.zip"
}

module "function" {
  source   = "../cloud_function"
  for_each = local.function_services

  project_id                  = var.project_id
  region                      = var.region
  name                        = each.value.name
  role                        = each.value.role
  stack                       = var.name_prefix
  runtime                     = var.functions.runtime
  source_archive              = { bucket = module.build_source_bucket.name, object = format(local.function_source_object, each.value.role) }
  build_service_account_email = module.iam.deployer_email
  docker_repository           = google_artifact_registry_repository.images.id
  service_account_email       = module.iam.role_emails[each.value.role]
  env                         = local.service_env[each.key]
  secret_env                  = var.roles[each.value.role].secret_env
  ingress                     = var.roles[each.value.role].ingress
  allow_unauthenticated       = each.value.role == "ingress"
  invokers                    = module.iam.invokers[each.value.role]
  developers                  = ["serviceAccount:${module.iam.deployer_email}"]
  # Control-plane roles reach a private-IP Cloud SQL through a connector (no Direct VPC egress).
  vpc_connector = contains(local.control_plane, each.value.role) ? var.functions.vpc_connector : null
  labels        = var.labels
  scaling = {
    min_instances   = var.roles[each.value.role].min_instances
    max_instances   = var.roles[each.value.role].max_instances
    concurrency     = var.roles[each.value.role].concurrency
    timeout_seconds = var.roles[each.value.role].timeout_seconds
  }
  resources = {
    cpu    = var.roles[each.value.role].cpu
    memory = var.roles[each.value.role].memory
  }

  depends_on = [google_project_service.this, module.cloudsql, google_secret_manager_secret_iam_member.secret_env]
}

# What every build does for the functions, whether or not a role is one yet (cloudbuild.yaml): list
# the stack's functions (read-only, project-wide: listing cannot be granted on one function) and
# upload each role's archive to the build-source bucket (create only, on that bucket: a new object
# per build, and the first-build name above when it is missing).
resource "google_project_iam_member" "deployer_lists_functions" {
  project = var.project_id
  role    = "roles/cloudfunctions.viewer"
  member  = "serviceAccount:${module.iam.deployer_email}"
}

resource "google_storage_bucket_iam_member" "deployer_function_sources" {
  bucket = module.build_source_bucket.name
  role   = "roles/storage.objectCreator"
  member = "serviceAccount:${module.iam.deployer_email}"
}

# A function's source is built as the deployer (build_config.service_account): deploying one needs
# actAs on that account, i.e. the deployer on itself; only when some role is a function.
resource "google_service_account_iam_member" "deployer_builds_functions" {
  count = length(local.function_services) > 0 ? 1 : 0

  service_account_id = "projects/${var.project_id}/serviceAccounts/${module.iam.deployer_email}"
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${module.iam.deployer_email}"
}
