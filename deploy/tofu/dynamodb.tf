# The DynamoDB tables macp-aws uses, exactly as macp-aws/schema.json declares them: names
# <name_prefix><table>, keys, attribute types, local and global secondary indexes. The Rust
# setup operation reads the same file, and tests/aws/check_tofu.py fails on any difference, so
# edit schema.json and this file together.
#
# Every table: on-demand capacity, point-in-time recovery, encryption at rest with the
# AWS-managed KMS key (alias/aws/dynamodb), deletion protection (var.deletion_protection).
#
# GSIs use hash_key / range_key: provider 6.29.0 added key_schema blocks and marks these
# deprecated (a warning), but key_schema had perpetual-diff and recreate-every-index bugs in
# the releases after it, and the check accepts either form when moving over.

resource "aws_dynamodb_table" "rooms" {
  name                        = "${var.name_prefix}rooms"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

resource "aws_dynamodb_table" "findings" {
  name                        = "${var.name_prefix}findings"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  range_key                   = "finding_id"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "finding_id"
    type = "S"
  }

  attribute {
    name = "seq"
    type = "N"
  }

  attribute {
    name = "pending"
    type = "S"
  }

  attribute {
    name = "created_at"
    type = "N"
  }

  # Per-room gap-free sequence: get_updates and get_timeline page by it.
  local_secondary_index {
    name            = "by_seq"
    range_key       = "seq"
    projection_type = "ALL"
  }

  # Sparse index of findings still to embed and index (the reconciler's work list).
  global_secondary_index {
    name            = "pending"
    hash_key        = "pending"
    range_key       = "created_at"
    projection_type = "ALL"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

resource "aws_dynamodb_table" "entities" {
  name                        = "${var.name_prefix}entities"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  range_key                   = "entity_id"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "entity_id"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

resource "aws_dynamodb_table" "relationships" {
  name                        = "${var.name_prefix}relationships"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  range_key                   = "sk"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  attribute {
    name = "target_pk"
    type = "S"
  }

  attribute {
    name = "target_sk"
    type = "S"
  }

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "edge"
    type = "S"
  }

  # Incoming edges of a node.
  global_secondary_index {
    name            = "by_target"
    hash_key        = "target_pk"
    range_key       = "target_sk"
    projection_type = "ALL"
  }

  # Every edge of a room (get_entity_graph).
  global_secondary_index {
    name            = "by_room"
    hash_key        = "room_id"
    range_key       = "edge"
    projection_type = "ALL"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

resource "aws_dynamodb_table" "agent_sessions" {
  name                        = "${var.name_prefix}agent_sessions"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  range_key                   = "agent_id"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "agent_id"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

# The room's event feed: every change, in commit order. The item with seq 0 is the room's feed
# head (the last seq), moved by a conditional write in the same transaction as each event.
resource "aws_dynamodb_table" "events" {
  name                        = "${var.name_prefix}events"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  range_key                   = "seq"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "seq"
    type = "N"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

# Claims on work: one item per room and claim key, written conditionally.
resource "aws_dynamodb_table" "claims" {
  name                        = "${var.name_prefix}claims"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  range_key                   = "key"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "key"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

# The decision queue: questions agents put to the people, and their first answer.
resource "aws_dynamodb_table" "decisions" {
  name                        = "${var.name_prefix}decisions"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  range_key                   = "decision_id"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "decision_id"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

resource "aws_dynamodb_table" "artifacts" {
  name                        = "${var.name_prefix}artifacts"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "room_id"
  range_key                   = "artifact_id"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "room_id"
    type = "S"
  }

  attribute {
    name = "artifact_id"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

locals {
  # Every table, by its schema.json name (outputs and the IAM policy use this).
  tables = {
    rooms          = aws_dynamodb_table.rooms
    findings       = aws_dynamodb_table.findings
    entities       = aws_dynamodb_table.entities
    relationships  = aws_dynamodb_table.relationships
    agent_sessions = aws_dynamodb_table.agent_sessions
    artifacts      = aws_dynamodb_table.artifacts
    events         = aws_dynamodb_table.events
    claims         = aws_dynamodb_table.claims
    decisions      = aws_dynamodb_table.decisions
  }
}

# MCP sessions of the 2025-11-25 generation, so that any instance can carry on a client's
# session (after a restart, a rolling replacement, or simply the next request landing on
# another instance). One item per session, keyed by a digest of its id; DynamoDB's TTL deletes
# an item some time after `expires_epoch` (typically within days), and the server never trusts
# an expired one meanwhile.
resource "aws_dynamodb_table" "protocol_sessions" {
  name                        = "${var.name_prefix}protocol_sessions"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "session_key"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "session_key"
    type = "S"
  }

  ttl {
    attribute_name = "expires_epoch"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}
