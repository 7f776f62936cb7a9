# Compute: an internal Application Load Balancer forwarding to `macp serve --backend aws` on
# var.instance_count EC2 instances (at least two) of an autoscaling group spread over the private
# subnets. Any instance answers any request: records, indexes and MCP sessions (the
# protocol_sessions table) live in DynamoDB and S3, so the balancer needs no stickiness for
# agents. A new launch template version replaces instances one at a time (instance refresh,
# at least half healthy): the balancer stops sending to an instance and drains it
# (deregistration_delay), then SIGTERM lets its calls in flight finish, and its clients' next
# requests carry on at the other instances without joining again.

data "aws_ssm_parameter" "al2023" {
  count = var.ami_id == null ? 1 : 0
  name  = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${var.instance_architecture}"
}

locals {
  ami_id = var.ami_id != null ? var.ami_id : data.aws_ssm_parameter.al2023[0].insecure_value

  https         = var.certificate_arn != null
  listener_port = local.https ? 443 : 80
  public_url    = var.public_url != null ? var.public_url : "${local.https ? "https" : "http"}://${aws_lb.this.dns_name}"

  cognito_issuer = "https://cognito-idp.${var.region}.amazonaws.com/${aws_cognito_user_pool.this.id}"

  # The environment of `macp serve --backend aws` (written to /etc/macp/macp.env). MACP_AUTH_* is
  # the Cognito setup of the root README: access tokens carry the app client id in client_id,
  # not aud. The server accepts the host of MACP_PUBLIC_URL in Host headers by itself.
  macp_env = merge(
    {
      AWS_REGION                 = var.region
      MACP_BIND                  = "0.0.0.0:${var.server_port}"
      MACP_PUBLIC_URL            = local.public_url
      MACP_DATA_DIR              = "/var/lib/macp"
      MACP_AUTH_ISSUER           = local.cognito_issuer
      MACP_AUTH_AUDIENCE         = aws_cognito_user_pool_client.agents.id
      MACP_AUTH_AUDIENCE_CLAIM   = "client_id"
      MACP_AUTH_USER_CLAIM       = "username"
      MACP_AUTH_READ_SCOPE       = "${var.resource_server_identifier}/read"
      MACP_AUTH_WRITE_SCOPE      = "${var.resource_server_identifier}/write"
      MACP_WEB_CLIENT_ID         = aws_cognito_user_pool_client.agents.id
      MACP_AWS_REGION            = var.region
      MACP_AWS_TABLE_PREFIX      = var.name_prefix
      MACP_AWS_ARTIFACT_BUCKET   = aws_s3_bucket.artifacts.bucket
      MACP_AWS_VECTOR_BUCKET     = aws_s3vectors_vector_bucket.vectors.vector_bucket_name
      MACP_EMBEDDER              = "titan"
      MACP_EMBEDDINGS_DIMENSIONS = tostring(var.embedding_dimension)
    },
    var.macp_extra_env,
  )
}

# ---------------------------------------------------------------------------------------------
# Load balancer
# ---------------------------------------------------------------------------------------------

resource "aws_lb" "this" {
  name                       = "${local.base}-alb"
  internal                   = true
  load_balancer_type         = "application"
  security_groups            = [aws_security_group.alb.id]
  subnets                    = aws_subnet.private[*].id
  drop_invalid_header_fields = true

  # Streamable HTTP keeps server-sent-event streams open between events.
  idle_timeout = 900
}

resource "aws_lb_target_group" "server" {
  name                 = "${local.base}-server"
  port                 = var.server_port
  protocol             = "HTTP"
  target_type          = "instance"
  vpc_id               = aws_vpc.this.id
  deregistration_delay = 30

  # For the web view only: a person's browser sign-in lives in the memory of the instance that
  # signed them in, so a browser keeps to one instance (an instance replaced means signing in
  # again). Agents need no stickiness: their MCP sessions are in DynamoDB.
  stickiness {
    type            = "lb_cookie"
    cookie_duration = 86400
    enabled         = true
  }

  # The protected-resource metadata: unauthenticated, not subject to the Host check of /mcp,
  # and 200 only once the server runs with its OAuth configuration.
  health_check {
    path                = "/.well-known/oauth-protected-resource"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

# Plain HTTP forwards only when the operator asked for it outright (allow_plain_http): bearer
# tokens must not cross the network in clear by default.
resource "aws_lb_listener" "http" {
  count = local.https ? 0 : 1

  load_balancer_arn = aws_lb.this.arn
  port              = 80
  protocol          = "HTTP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.server.arn
  }

  lifecycle {
    precondition {
      condition     = var.allow_plain_http
      error_message = "Set certificate_arn (an ACM certificate for the name in public_url): agents send bearer tokens, which must not cross the network in clear. For a throwaway test deployment only, allow_plain_http = true serves plain HTTP."
    }
  }
}

# With TLS, port 80 answers only with a redirect to HTTPS: a client configured with http://
# learns the right URL and sends nothing over it.
resource "aws_lb_listener" "http_redirect" {
  count = local.https ? 1 : 0

  load_balancer_arn = aws_lb.this.arn
  port              = 80
  protocol          = "HTTP"

  default_action {
    type = "redirect"

    redirect {
      protocol    = "HTTPS"
      port        = "443"
      status_code = "HTTP_301"
    }
  }
}

resource "aws_lb_listener" "https" {
  count = local.https ? 1 : 0

  load_balancer_arn = aws_lb.this.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.server.arn
  }

  lifecycle {
    precondition {
      condition     = var.public_url != null
      error_message = "With certificate_arn, set public_url to the HTTPS name the certificate covers (the load balancer's own DNS name is not on it)."
    }
  }
}

# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------

resource "aws_launch_template" "server" {
  name_prefix            = "${local.base}-server-"
  image_id               = local.ami_id
  instance_type          = var.instance_type
  vpc_security_group_ids = [aws_security_group.server.id]
  update_default_version = true

  iam_instance_profile {
    arn = aws_iam_instance_profile.server.arn
  }

  user_data = base64encode(templatefile("${path.module}/templates/user_data.sh.tftpl", {
    region        = var.region
    binary_s3_uri = var.macp_binary_s3_uri
    binary_sha256 = var.macp_binary_sha256
    env           = local.macp_env
  }))

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  block_device_mappings {
    device_name = "/dev/xvda"

    ebs {
      volume_size           = 20
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = { Name = "${local.base}-server" }
  }

  tag_specifications {
    resource_type = "volume"
    tags          = { Name = "${local.base}-server" }
  }

  lifecycle {
    precondition {
      condition     = alltrue([for k, v in local.macp_env : can(regex("^[A-Za-z_][A-Za-z0-9_]*$", k)) && !can(regex("[\\n\\r\"\\\\]", v))])
      error_message = "macp_extra_env: names must be environment variable names and values must not contain newlines, double quotes or backslashes."
    }
  }
}

resource "aws_autoscaling_group" "server" {
  name                      = "${local.base}-server"
  min_size                  = var.instance_count
  max_size                  = var.instance_count + 1
  desired_capacity          = var.instance_count
  vpc_zone_identifier       = aws_subnet.private[*].id
  target_group_arns         = [aws_lb_target_group.server.arn]
  health_check_type         = "ELB"
  health_check_grace_period = 300

  launch_template {
    id      = aws_launch_template.server.id
    version = aws_launch_template.server.latest_version
  }

  # A new launch template version (new binary, AMI or environment) replaces the instances one
  # batch at a time, launching a new one before terminating an old one (max_healthy_percentage),
  # and never below half of them healthy: no outage, and no agent re-joins (sessions are in
  # DynamoDB). instance_warmup covers the server's start and two passed health checks.
  instance_refresh {
    strategy = "Rolling"

    preferences {
      min_healthy_percentage = 50
      max_healthy_percentage = 150
      instance_warmup        = 60
    }
  }

  tag {
    key                 = "Name"
    value               = "${local.base}-server"
    propagate_at_launch = true
  }

  # The server needs its endpoints and, for the JWKS, the NAT route before it starts.
  depends_on = [
    aws_vpc_endpoint.dynamodb,
    aws_vpc_endpoint.s3,
    aws_vpc_endpoint.interface,
    aws_route.private_egress,
  ]
}
