# Storage: the private artifact bucket, and the S3 Vectors bucket and index for semantic search.

# ---------------------------------------------------------------------------------------------
# Artifact bucket. Agents upload and download through presigned URLs the server signs, scoped to
# rooms/<room_id>/…; nothing is public, nothing needs CORS (agents are not browsers).
# ---------------------------------------------------------------------------------------------

resource "aws_s3_bucket" "artifacts" {
  bucket = "${local.base}-artifacts-${local.account_id}-${var.region}"
}

resource "aws_s3_bucket_ownership_controls" "artifacts" {
  bucket = aws_s3_bucket.artifacts.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "artifacts" {
  bucket = aws_s3_bucket.artifacts.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "artifacts" {
  bucket = aws_s3_bucket.artifacts.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_versioning" "artifacts" {
  count  = var.artifact_bucket_versioning ? 1 : 0
  bucket = aws_s3_bucket.artifacts.id

  versioning_configuration {
    status = "Enabled"
  }
}

data "aws_iam_policy_document" "artifacts_bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.artifacts.arn,
      "${aws_s3_bucket.artifacts.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "artifacts" {
  bucket = aws_s3_bucket.artifacts.id
  policy = data.aws_iam_policy_document.artifacts_bucket.json

  # The public access block must exist first, or S3 may judge the policy by the account default.
  depends_on = [aws_s3_bucket_public_access_block.artifacts]
}

# ---------------------------------------------------------------------------------------------
# S3 Vectors: one vector bucket, one index of the findings' embeddings, named the way macp-aws
# names the index of its embedding model (local.vector_index_name). Every metadata key is
# filterable unless listed as non-filterable, which covers schema.json's filterable_metadata
# (room_id, tags, agent_id). Data type, dimension and metric are fixed at creation: changing
# embedding_dimension creates the index for the new dimension (then run `macp reindex`).
# ---------------------------------------------------------------------------------------------

resource "aws_s3vectors_vector_bucket" "vectors" {
  vector_bucket_name = "${local.base}-vectors"

  encryption_configuration {
    sse_type = "AES256"
  }
}

resource "aws_s3vectors_index" "findings" {
  index_name         = local.vector_index_name
  vector_bucket_name = aws_s3vectors_vector_bucket.vectors.vector_bucket_name

  data_type       = "float32"
  dimension       = var.embedding_dimension
  distance_metric = "cosine"
}
