variable "project_id" {
  description = "Project the trigger runs builds in."
  type        = string
}

variable "region" {
  description = "Region of the trigger when it watches a 2nd-gen repository connection (those triggers are regional)."
  type        = string
}

variable "name" {
  description = "Trigger name."
  type        = string
}

variable "service_account_email" {
  description = "The deployer: the user-specified build service account the builds run as (modules/iam)."
  type        = string
}

variable "substitutions" {
  description = "The substitutions of cloudbuild.yaml for this stack (_REGION, _REPOSITORY, _NAME_PREFIX)."
  type        = map(string)
}

variable "source_repo" {
  description = "What the trigger watches: a 2nd-gen Cloud Build repository (projects/<p>/locations/<r>/connections/<c>/repositories/<name>), or a GitHub repository connected through the Cloud Build GitHub app (github_owner and github_name); pushes to branches matching branch (a regular expression) start a build of cloudbuild.yaml."
  type = object({
    repository   = optional(string)
    github_owner = optional(string)
    github_name  = optional(string)
    branch       = optional(string, "^main$")
  })

  validation {
    condition     = (var.source_repo.repository != null) != (var.source_repo.github_owner != null && var.source_repo.github_name != null)
    error_message = "Set either repository (a 2nd-gen connection's repository) or both github_owner and github_name."
  }
}

variable "ignored_files" {
  description = "Globs of changed files that start no build when they are the only changes."
  type        = list(string)
  default     = ["docs/**", "**/*.md", "bench/**"]
}
