# The server's role: only the calls macp-aws makes (macp-aws/src), on this stack's resources.
#
#   DynamoDB   GetItem, BatchGetItem, Query, Scan, PutItem, UpdateItem (TransactWriteItems needs
#              the Put/Update permissions of its parts) on the tables and their indexes;
#              DeleteItem and BatchWriteItem to purge a room whose retention ran out. No table
#              management: tables come from here, and `AwsBackend::setup` (which creates
#              tables) is for development only.
#   S3         presigned PUT / GET (signed with this role's credentials) and HeadObject under
#              rooms/ only; ListBucket so that HeadObject on a missing key answers 404, which
#              macp-aws reads as "not uploaded", rather than 403 (every authenticated user may
#              read every room, so listing keys exposes nothing more); DeleteObject,
#              DeleteObjectVersion and ListBucketVersions to erase an artifact and purge a room
#              (every version, so a versioned bucket keeps nothing behind a delete marker).
#   S3 Vectors the vector calls on indexes named macp-* in this stack's vector bucket: data
#              (Put/Get/Query/List/DeleteVectors) and CreateIndex / DeleteIndex, because
#              macp-aws binds an index per embedding model (CreateIndex answers Conflict when the
#              index below exists) and `macp reindex` deletes the old model's index.
#   Bedrock    InvokeModel on amazon.titan-embed-text-v2:0 in this Region, nothing else.
#   Boot       GetObject on the one macp binary.

data "aws_iam_policy_document" "server_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "server" {
  name_prefix        = "${local.base}-server-"
  description        = "macp serve on EC2"
  assume_role_policy = data.aws_iam_policy_document.server_assume.json
}

resource "aws_iam_instance_profile" "server" {
  name_prefix = "${local.base}-server-"
  role        = aws_iam_role.server.name
}

data "aws_iam_policy_document" "server" {
  statement {
    sid = "Tables"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
      "dynamodb:Query",
      "dynamodb:Scan",
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:BatchWriteItem",
    ]
    resources = [
      aws_dynamodb_table.rooms.arn,
      "${aws_dynamodb_table.rooms.arn}/index/*",
      aws_dynamodb_table.findings.arn,
      "${aws_dynamodb_table.findings.arn}/index/*",
      aws_dynamodb_table.entities.arn,
      "${aws_dynamodb_table.entities.arn}/index/*",
      aws_dynamodb_table.relationships.arn,
      "${aws_dynamodb_table.relationships.arn}/index/*",
      aws_dynamodb_table.agent_sessions.arn,
      "${aws_dynamodb_table.agent_sessions.arn}/index/*",
      aws_dynamodb_table.artifacts.arn,
      "${aws_dynamodb_table.artifacts.arn}/index/*",
      aws_dynamodb_table.events.arn,
      aws_dynamodb_table.claims.arn,
      aws_dynamodb_table.decisions.arn,
      aws_dynamodb_table.protocol_sessions.arn,
    ]
  }

  statement {
    sid = "ArtifactObjects"
    # Delete and DeleteObjectVersion: erasing an artifact removes every version of its object.
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"]
    resources = ["${aws_s3_bucket.artifacts.arn}/${local.artifact_key_prefix}*"]
  }

  statement {
    sid       = "ArtifactBucket"
    actions   = ["s3:ListBucket", "s3:ListBucketVersions"]
    resources = [aws_s3_bucket.artifacts.arn]
  }

  statement {
    sid = "VectorIndexes"
    actions = [
      "s3vectors:PutVectors",
      "s3vectors:GetVectors",
      "s3vectors:QueryVectors",
      "s3vectors:ListVectors",
      "s3vectors:DeleteVectors",
      "s3vectors:CreateIndex",
      "s3vectors:DeleteIndex",
    ]
    resources = ["${aws_s3vectors_vector_bucket.vectors.vector_bucket_arn}/index/macp-*"]
  }

  statement {
    sid       = "Embeddings"
    actions   = ["bedrock:InvokeModel"]
    resources = ["arn:${local.partition}:bedrock:${var.region}::foundation-model/${local.embedding_model_id}"]
  }

  statement {
    sid       = "Binary"
    actions   = ["s3:GetObject"]
    resources = ["arn:${local.partition}:s3:::${local.binary_bucket}/${local.binary_key}"]
  }
}

resource "aws_iam_role_policy" "server" {
  name   = "macp-server"
  role   = aws_iam_role.server.id
  policy = data.aws_iam_policy_document.server.json
}

# Optional: Session Manager access to the instance (var.enable_session_manager).
resource "aws_iam_role_policy_attachment" "session_manager" {
  count = var.enable_session_manager ? 1 : 0

  role       = aws_iam_role.server.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}
