terraform {
  required_version = ">= 1.11" # write-only arguments and ephemeral values (the Cloud SQL admin password)

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 7.0"
    }
  }
}
