terraform {
  required_version = ">= 1.11" # write-only arguments and ephemeral values (the Cloud SQL admin password)

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 7.0"
    }
    # ephemeral "random_password": the Cloud SQL admin password, never in the state.
    random = {
      source  = "hashicorp/random"
      version = ">= 3.7, < 4.0"
    }
    # google_project_service_identity (the Pub/Sub service agent) exists in google-beta only.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 6.0, < 7.0"
    }
  }

  # State in a GCS bucket of the operator's choosing:
  #   terraform init -backend-config="bucket=<state bucket>" -backend-config="prefix=noetl/dev"
  backend "gcs" {}
}
