# Versions and the provider.
#
# aws_s3vectors_vector_bucket and aws_s3vectors_index first shipped in the AWS provider 6.24.0
# (2 December 2025); the index's encryption_configuration and metadata_configuration blocks in
# 6.26.0. 6.26.0 is the floor; 7.x is excluded until checked. OpenTofu resolves
# "hashicorp/aws" from its own registry, which mirrors the same releases.

terraform {
  required_version = ">= 1.6.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.26.0, < 7.0.0"
    }
  }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge({ Application = "macp", ManagedBy = "opentofu" }, var.tags)
  }
}
