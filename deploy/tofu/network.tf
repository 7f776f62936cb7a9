# Network: a VPC whose server and load balancer live in private subnets only. AWS APIs are reached
# through VPC endpoints (DynamoDB and S3 gateways, S3 Vectors and Bedrock Runtime interfaces).
# An optional single NAT gateway gives outbound HTTPS for the one call that has no private path:
# fetching the Cognito user pool's JWKS (see var.enable_nat_gateway).

resource "aws_vpc" "this" {
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true # interface endpoints' private DNS needs both

  tags = { Name = "${local.base}-vpc" }
}

# The default security group allows all traffic between its members: strip it.
resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id
}

resource "aws_subnet" "private" {
  count = var.az_count

  vpc_id            = aws_vpc.this.id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, count.index)

  tags = { Name = "${local.base}-private-${local.azs[count.index]}" }
}

resource "aws_route_table" "private" {
  vpc_id = aws_vpc.this.id

  tags = { Name = "${local.base}-private" }
}

resource "aws_route_table_association" "private" {
  count = var.az_count

  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private.id
}

# ---------------------------------------------------------------------------------------------
# Optional egress: one public subnet, an internet gateway and a NAT gateway. Nothing but the NAT
# gateway lives in the public subnet.
# ---------------------------------------------------------------------------------------------

resource "aws_internet_gateway" "this" {
  count  = var.enable_nat_gateway ? 1 : 0
  vpc_id = aws_vpc.this.id

  tags = { Name = "${local.base}-igw" }
}

resource "aws_subnet" "public" {
  count = var.enable_nat_gateway ? 1 : 0

  vpc_id            = aws_vpc.this.id
  availability_zone = local.azs[0]
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, 8)

  tags = { Name = "${local.base}-public-${local.azs[0]}" }
}

resource "aws_route_table" "public" {
  count  = var.enable_nat_gateway ? 1 : 0
  vpc_id = aws_vpc.this.id

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this[0].id
  }

  tags = { Name = "${local.base}-public" }
}

resource "aws_route_table_association" "public" {
  count = var.enable_nat_gateway ? 1 : 0

  subnet_id      = aws_subnet.public[0].id
  route_table_id = aws_route_table.public[0].id
}

resource "aws_eip" "nat" {
  count  = var.enable_nat_gateway ? 1 : 0
  domain = "vpc"

  tags = { Name = "${local.base}-nat" }
}

resource "aws_nat_gateway" "this" {
  count = var.enable_nat_gateway ? 1 : 0

  allocation_id = aws_eip.nat[0].id
  subnet_id     = aws_subnet.public[0].id

  tags = { Name = "${local.base}-nat" }

  depends_on = [aws_internet_gateway.this]
}

resource "aws_route" "private_egress" {
  count = var.enable_nat_gateway ? 1 : 0

  route_table_id         = aws_route_table.private.id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.this[0].id
}

# ---------------------------------------------------------------------------------------------
# VPC endpoints.
# ---------------------------------------------------------------------------------------------

resource "aws_vpc_endpoint" "dynamodb" {
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.dynamodb"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]

  tags = { Name = "${local.base}-dynamodb" }
}

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]

  tags = { Name = "${local.base}-s3" }
}

locals {
  interface_endpoints = toset(concat(
    ["s3vectors", "bedrock-runtime"],
    var.additional_interface_endpoints,
    var.enable_session_manager ? ["ssm", "ssmmessages", "ec2messages"] : [],
  ))
}

resource "aws_vpc_endpoint" "interface" {
  for_each = local.interface_endpoints

  vpc_id              = aws_vpc.this.id
  service_name        = "com.amazonaws.${var.region}.${each.key}"
  vpc_endpoint_type   = "Interface"
  subnet_ids          = aws_subnet.private[*].id
  security_group_ids  = [aws_security_group.endpoints.id]
  private_dns_enabled = true

  tags = { Name = "${local.base}-${each.key}" }
}

# ---------------------------------------------------------------------------------------------
# Security groups: clients -> ALB -> server -> endpoints / NAT.
# ---------------------------------------------------------------------------------------------

resource "aws_security_group" "alb" {
  name        = "${local.base}-alb"
  description = "Internal load balancer in front of macp serve"
  vpc_id      = aws_vpc.this.id

  tags = { Name = "${local.base}-alb" }
}

resource "aws_vpc_security_group_ingress_rule" "alb_from_clients" {
  for_each = toset(local.client_cidrs)

  security_group_id = aws_security_group.alb.id
  description       = "Agents' hosts"
  cidr_ipv4         = each.key
  ip_protocol       = "tcp"
  from_port         = local.listener_port
  to_port           = local.listener_port
}

# Port 80 too when it only redirects to HTTPS (see aws_lb_listener.http_redirect).
resource "aws_vpc_security_group_ingress_rule" "alb_redirect_from_clients" {
  for_each = local.https ? toset(local.client_cidrs) : toset([])

  security_group_id = aws_security_group.alb.id
  description       = "Agents' hosts: HTTP, redirected to HTTPS"
  cidr_ipv4         = each.key
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
}

resource "aws_vpc_security_group_egress_rule" "alb_to_server" {
  security_group_id            = aws_security_group.alb.id
  description                  = "Forward to macp serve"
  referenced_security_group_id = aws_security_group.server.id
  ip_protocol                  = "tcp"
  from_port                    = var.server_port
  to_port                      = var.server_port
}

resource "aws_security_group" "server" {
  name        = "${local.base}-server"
  description = "macp serve on EC2"
  vpc_id      = aws_vpc.this.id

  tags = { Name = "${local.base}-server" }
}

resource "aws_vpc_security_group_ingress_rule" "server_from_alb" {
  security_group_id            = aws_security_group.server.id
  description                  = "From the load balancer"
  referenced_security_group_id = aws_security_group.alb.id
  ip_protocol                  = "tcp"
  from_port                    = var.server_port
  to_port                      = var.server_port
}

# HTTPS out: VPC endpoints, the S3 and DynamoDB gateways (public prefixes routed privately) and,
# with NAT, the Cognito JWKS.
resource "aws_vpc_security_group_egress_rule" "server_https" {
  security_group_id = aws_security_group.server.id
  description       = "HTTPS to AWS APIs and the Cognito JWKS"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_security_group" "endpoints" {
  name        = "${local.base}-endpoints"
  description = "Interface VPC endpoints"
  vpc_id      = aws_vpc.this.id

  tags = { Name = "${local.base}-endpoints" }
}

resource "aws_vpc_security_group_ingress_rule" "endpoints_from_server" {
  security_group_id            = aws_security_group.endpoints.id
  description                  = "HTTPS from the server"
  referenced_security_group_id = aws_security_group.server.id
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
}
