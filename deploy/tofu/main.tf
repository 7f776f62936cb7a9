# MACP on AWS, milestone 1 (see README.md): the six DynamoDB tables, the artifact bucket, the
# S3 Vectors bucket and index, a private VPC with endpoints, an internal ALB in front of
# `macp serve --backend aws` on EC2, Cognito for sign-in, and the server's least-privilege role.
#
# Files: dynamodb.tf (tables), storage.tf (artifact bucket, vector bucket and index),
# network.tf (VPC, subnets, endpoints), compute.tf (ALB, launch template, autoscaling group),
# iam.tf (server role), cognito.tf (user pool, resource server, client, identity provider).

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

data "aws_availability_zones" "available" {
  state = "available"

  filter {
    name   = "opt-in-status"
    values = ["opt-in-not-required"]
  }
}

locals {
  # "macp-" -> "macp": the base of every name that is not a DynamoDB table.
  base = trimsuffix(var.name_prefix, "-")

  account_id = data.aws_caller_identity.current.account_id
  partition  = data.aws_partition.current.partition

  azs = slice(data.aws_availability_zones.available.names, 0, var.az_count)

  # The only Bedrock model the server may invoke (embeddings for semantic search).
  embedding_model_id = "amazon.titan-embed-text-v2:0"

  # macp-aws names the index serving an embedding model "macp-<first 12 hex digits of
  # sha256(model id)>-<dimension>", where the Titan embedder's model id is
  # "amazon.titan-embed-text-v2:0@<dimension>" (macp-aws/src/vectors.rs, titan.rs). Creating
  # that exact index here means the server finds it rather than creating its own.
  vector_index_name = "macp-${substr(sha256("${local.embedding_model_id}@${var.embedding_dimension}"), 0, 12)}-${var.embedding_dimension}"

  # Key prefix under which macp stores artifacts (rooms/<room_id>/artifacts/<ulid>/<file>).
  artifact_key_prefix = "rooms/"

  # The binary the instance downloads at boot.
  binary_bucket = regex("^s3://([^/]+)/(.+)$", var.macp_binary_s3_uri)[0]
  binary_key    = regex("^s3://([^/]+)/(.+)$", var.macp_binary_s3_uri)[1]

  cognito_domain_prefix = coalesce(var.cognito_domain_prefix, "${local.base}-${local.account_id}")

  federated           = var.idp_type != "none"
  allow_cognito_users = var.allow_cognito_users != null ? var.allow_cognito_users : !local.federated

  client_cidrs = length(var.allowed_client_cidrs) > 0 ? var.allowed_client_cidrs : [var.vpc_cidr]
}
