# Cloud Build on every push to the deploy branch: cloudbuild.yaml (tests, image, migration, rollout,
# smoke tests) as the deployer service account, the same build `gcloud builds submit` runs by hand
# (docs/deploy.md, "Continuous deployment"). The repository is connected once in the console (the
# GitHub app, or a 2nd-gen connection); Terraform does not hold the connection's credentials.

locals {
  second_gen = var.source_repo.repository != null
}

resource "google_cloudbuild_trigger" "deploy" {
  project     = var.project_id
  name        = var.name
  location    = local.second_gen ? var.region : "global"
  description = "Test, build, migrate and roll out the stack on a push to ${var.source_repo.branch}."

  filename        = "cloudbuild.yaml"
  service_account = "projects/${var.project_id}/serviceAccounts/${var.service_account_email}"
  substitutions   = var.substitutions
  ignored_files   = var.ignored_files

  dynamic "repository_event_config" {
    for_each = local.second_gen ? [var.source_repo.repository] : []
    content {
      repository = repository_event_config.value
      push {
        branch = var.source_repo.branch
      }
    }
  }

  dynamic "github" {
    for_each = local.second_gen ? [] : [var.source_repo]
    content {
      owner = github.value.github_owner
      name  = github.value.github_name
      push {
        branch = github.value.branch
      }
    }
  }
}
