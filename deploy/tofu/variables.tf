# Inputs. Only macp_binary_s3_uri is required; everything else has a working default.

# ---------------------------------------------------------------------------------------------
# Where and what
# ---------------------------------------------------------------------------------------------

variable "region" {
  description = "AWS Region for every resource. Must be one where Amazon S3 Vectors is generally available (the list below is the same as s3_vectors_regions in macp-aws/schema.json; tests/aws/check_tofu.py keeps them equal)."
  type        = string
  default     = "us-west-2"

  validation {
    # Source: Amazon S3 User Guide, "AWS Regions, endpoints, and quotas for S3 Vectors" (the 14
    # Regions of the December 2025 GA).
    condition = contains([
      "ap-northeast-1",
      "ap-northeast-2",
      "ap-south-1",
      "ap-southeast-1",
      "ap-southeast-2",
      "ca-central-1",
      "eu-central-1",
      "eu-north-1",
      "eu-west-1",
      "eu-west-2",
      "eu-west-3",
      "us-east-1",
      "us-east-2",
      "us-west-2",
    ], var.region)
    error_message = "The region must be one where Amazon S3 Vectors is available: ap-northeast-1, ap-northeast-2, ap-south-1, ap-southeast-1, ap-southeast-2, ca-central-1, eu-central-1, eu-north-1, eu-west-1, eu-west-2, eu-west-3, us-east-1, us-east-2, us-west-2."
  }
}

variable "name_prefix" {
  description = "Prefix of every name. DynamoDB tables are <name_prefix><table> exactly as macp-aws expects (e.g. macp-findings); the prefix without its trailing hyphen names the buckets, the load balancer and the rest."
  type        = string
  default     = "macp-"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,14}$", var.name_prefix))
    error_message = "name_prefix must be 1-15 characters: lowercase letters, digits and hyphens, starting with a letter (it is part of S3 bucket and load balancer names)."
  }
}

variable "tags" {
  description = "Tags added to every resource (on top of Application=macp and ManagedBy=opentofu)."
  type        = map(string)
  default     = {}
}

variable "deletion_protection" {
  description = "Protect the DynamoDB tables and the Cognito user pool from deletion. Turn off only to tear a test stack down."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------

variable "vpc_cidr" {
  description = "CIDR block of the VPC. Private subnets take the first /20s of it (one per AZ), public subnets (only with a NAT gateway) the /20s from the middle."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be an IPv4 CIDR block of /20 or larger."
  }
}

variable "az_count" {
  description = "How many Availability Zones the subnets span (the internal ALB needs at least 2)."
  type        = number
  default     = 2

  validation {
    condition     = var.az_count >= 2 && var.az_count <= 3
    error_message = "az_count must be 2 or 3."
  }
}

variable "allowed_client_cidrs" {
  description = "CIDR blocks allowed to reach the internal load balancer (where the agents' hosts are: this VPC, or networks routed to it by peering, Transit Gateway or VPN). Empty means the VPC's own CIDR."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.allowed_client_cidrs : can(cidrhost(c, 0))])
    error_message = "Every entry of allowed_client_cidrs must be an IPv4 CIDR block."
  }
}

variable "enable_nat_gateway" {
  description = "Give the private subnets outbound internet through one NAT gateway. The server must fetch the Cognito user pool's JWKS (https://cognito-idp.<region>.amazonaws.com/<pool>/.well-known/jwks.json), and Cognito's PrivateLink endpoint does not serve user pools that have a domain, which the hosted sign-in needs. Without NAT, provide another route to that URL (an egress proxy) or the server cannot validate tokens. AWS APIs macp uses go through VPC endpoints either way."
  type        = bool
  default     = true
}

variable "additional_interface_endpoints" {
  description = "Interface VPC endpoints to add besides S3 Vectors and Bedrock Runtime (which are always created), as service short names (com.amazonaws.<region>.<name>). sts serves SDKs that assume roles; logs serves a CloudWatch agent if you add one. Empty list to save the hourly cost."
  type        = list(string)
  default     = ["sts", "logs"]

  validation {
    condition     = alltrue([for s in var.additional_interface_endpoints : can(regex("^[a-z0-9.-]+$", s)) && !contains(["s3", "dynamodb", "s3vectors", "bedrock-runtime"], s)])
    error_message = "additional_interface_endpoints holds service short names such as sts or logs; s3 and dynamodb (gateway endpoints) and s3vectors and bedrock-runtime are created already."
  }
}

variable "enable_session_manager" {
  description = "Allow AWS Systems Manager Session Manager on the instance (attaches AmazonSSMManagedInstanceCore and adds the ssm, ssmmessages and ec2messages endpoints). Off by default: the server role then holds only what macp needs."
  type        = bool
  default     = false
}

# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------

variable "macp_binary_s3_uri" {
  description = "s3://bucket/key of the macp executable (a Linux build for instance_architecture, e.g. target/release/macp uploaded as s3://my-releases/macp/0.1.0/macp-x86_64-linux). The instance downloads it at boot through the S3 gateway endpoint, so the bucket must be in var.region (or enable_nat_gateway must be on). Changing it rolls the instance."
  type        = string

  validation {
    condition     = can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.+$", var.macp_binary_s3_uri))
    error_message = "macp_binary_s3_uri must look like s3://bucket/path/to/macp."
  }
}

variable "macp_binary_sha256" {
  description = "Expected SHA-256 (hex) of the macp executable; the instance refuses to start a binary that does not match. Empty skips the check."
  type        = string
  default     = ""

  validation {
    condition     = var.macp_binary_sha256 == "" || can(regex("^[0-9a-f]{64}$", var.macp_binary_sha256))
    error_message = "macp_binary_sha256 must be empty or 64 lowercase hex digits."
  }
}

variable "instance_type" {
  description = "EC2 instance type of the server (its architecture must match instance_architecture)."
  type        = string
  default     = "t3.small"
}

variable "instance_count" {
  description = "Instances the autoscaling group keeps running behind the load balancer (at least 2: any instance answers any request, MCP sessions live in DynamoDB, and a rolling replacement or a lost instance drops no agent)."
  type        = number
  default     = 2

  validation {
    condition     = var.instance_count >= 2 && var.instance_count <= 20
    error_message = "instance_count must be between 2 and 20: one instance cannot be replaced without an outage."
  }
}

variable "instance_architecture" {
  description = "CPU architecture of the instance, its Amazon Linux 2023 AMI and the macp binary: x86_64 or arm64."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.instance_architecture)
    error_message = "instance_architecture must be x86_64 or arm64."
  }
}

variable "ami_id" {
  description = "AMI of the server. Default: the latest Amazon Linux 2023 for instance_architecture, read from its public SSM parameter at plan time (a new release then rolls the instance on the next apply; pin an id to avoid that)."
  type        = string
  default     = null
}

variable "server_port" {
  description = "Port macp serve listens on inside the instance (the load balancer forwards to it)."
  type        = number
  default     = 8765
}

variable "certificate_arn" {
  description = "ACM certificate for the load balancer's HTTPS listener (for the name in public_url). Required unless allow_plain_http: agents send bearer tokens, which must not cross the network in clear. Port 80 then only redirects to HTTPS."
  type        = string
  default     = null
}

variable "allow_plain_http" {
  description = "Serve plain HTTP on port 80 without a certificate, for a throwaway test deployment only: every agent's bearer token then crosses the VPC (and any peering or VPN) in clear."
  type        = bool
  default     = false
}

variable "public_url" {
  description = "Base URL agents use to reach the server (e.g. https://macp.internal.example.com, resolved privately to the load balancer). Default: the load balancer's own DNS name. It becomes MACP_PUBLIC_URL and the OAuth resource <public_url>/mcp."
  type        = string
  default     = null

  validation {
    condition     = var.public_url == null || can(regex("^https?://[^/]+$", var.public_url))
    error_message = "public_url must be a scheme and host (and optional port) without a path, e.g. https://macp.internal.example.com."
  }
}

variable "macp_extra_env" {
  description = "Extra MACP_* environment for macp serve (e.g. { MACP_LOG = \"debug\" }). Entries here override the module's own."
  type        = map(string)
  default     = {}
}

# ---------------------------------------------------------------------------------------------
# Search
# ---------------------------------------------------------------------------------------------

variable "embedding_dimension" {
  description = "Dimension of the S3 Vectors index and of the Titan Text Embeddings V2 vectors macp requests (that model offers 256, 512 or 1024). Changing it replaces the index: run macp reindex afterwards."
  type        = number
  default     = 256

  validation {
    condition     = contains([256, 512, 1024], var.embedding_dimension)
    error_message = "embedding_dimension must be 256, 512 or 1024 (the sizes amazon.titan-embed-text-v2:0 produces)."
  }
}

variable "artifact_bucket_versioning" {
  description = "Turn on versioning for the artifact bucket (macp never overwrites a key, so this only guards against deletes made outside macp)."
  type        = bool
  default     = false
}

# ---------------------------------------------------------------------------------------------
# Sign-in (Cognito)
# ---------------------------------------------------------------------------------------------

variable "cognito_domain_prefix" {
  description = "Prefix of the Cognito hosted sign-in domain (<prefix>.auth.<region>.amazoncognito.com). Must be unique in the Region and must not contain aws, amazon or cognito. Default: <name_prefix without hyphen>-<account id>."
  type        = string
  default     = null

  validation {
    condition     = var.cognito_domain_prefix == null || can(regex("^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$", var.cognito_domain_prefix))
    error_message = "cognito_domain_prefix must be 1-63 lowercase letters, digits and hyphens, not starting or ending with a hyphen."
  }
}

variable "callback_urls" {
  description = "Loopback redirect URIs of the public agent client: Kiro's oauth.redirectUri, and Claude Code's http://localhost:<callback-port>/callback. Cognito matches them exactly, port and path included."
  type        = list(string)
  default     = ["http://127.0.0.1:8080", "http://localhost:8080", "http://localhost:8080/callback"]

  validation {
    condition     = length(var.callback_urls) > 0 && alltrue([for u in var.callback_urls : can(regex("^http://(127\\.0\\.0\\.1|localhost|\\[::1\\])(:[0-9]{1,5})?(/[^?#]*)?$", u))])
    error_message = "callback_urls must be loopback URLs (http://127.0.0.1:PORT, http://localhost:PORT or http://[::1]:PORT, with an optional path): the agent client is public and receives the code on the operator's own machine."
  }
}

variable "resource_server_identifier" {
  description = "Identifier of the Cognito resource server; scopes are <identifier>/<scope> (macp/read, macp/write)."
  type        = string
  default     = "macp"

  validation {
    condition     = can(regex("^[A-Za-z0-9._:-]{1,256}$", var.resource_server_identifier))
    error_message = "resource_server_identifier must be 1-256 letters, digits, dots, underscores, colons or hyphens."
  }
}

variable "scopes" {
  description = "Scopes of the resource server, name => description. read and write are required: macp serve enforces <identifier>/read on read tools and <identifier>/write on write tools."
  type        = map(string)
  default = {
    read  = "Read rooms, findings, entities and artifacts"
    write = "Create rooms, post findings, add entities, relationships and artifacts"
  }

  validation {
    condition     = contains(keys(var.scopes), "read") && contains(keys(var.scopes), "write")
    error_message = "scopes must define read and write."
  }
}

variable "access_token_validity_minutes" {
  description = "Lifetime of access tokens (the agent's client refreshes them with its refresh token)."
  type        = number
  default     = 60

  validation {
    condition     = var.access_token_validity_minutes >= 5 && var.access_token_validity_minutes <= 1440
    error_message = "access_token_validity_minutes must be between 5 and 1440."
  }
}

variable "refresh_token_validity_days" {
  description = "Lifetime of refresh tokens: how long an agent stays signed in without a browser."
  type        = number
  default     = 7

  validation {
    condition     = var.refresh_token_validity_days >= 1 && var.refresh_token_validity_days <= 3650
    error_message = "refresh_token_validity_days must be between 1 and 3650."
  }
}

variable "idp_type" {
  description = "Federated human identity provider for the user pool: none, SAML or OIDC. With one, only its users can sign in (the access perimeter) unless allow_cognito_users is true."
  type        = string
  default     = "none"

  validation {
    condition     = contains(["none", "SAML", "OIDC"], var.idp_type)
    error_message = "idp_type must be none, SAML or OIDC."
  }
}

variable "idp_name" {
  description = "Name of the federated identity provider as Cognito shows it (e.g. Corporate)."
  type        = string
  default     = "Corporate"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9.-]{1,31}$", var.idp_name))
    error_message = "idp_name must be 2-32 characters: letters, digits, dots and hyphens, starting with a letter or digit."
  }
}

variable "idp_provider_details" {
  description = "Cognito provider_details of the identity provider. SAML: { MetadataURL = \"https://…\" } (or MetadataFile). OIDC: { client_id, client_secret, authorize_scopes = \"openid email profile\", oidc_issuer, attributes_request_method = \"GET\" }. Values end up in the state file: keep the state encrypted."
  type        = map(string)
  default     = {}
  sensitive   = true
}

variable "idp_attribute_mapping" {
  description = "User pool attribute => IdP claim or SAML attribute. The default maps email for OIDC; for SAML use the assertion's attribute names (e.g. { email = \"http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress\" })."
  type        = map(string)
  default     = { email = "email" }
}

variable "allow_cognito_users" {
  description = "Let users local to the Cognito user pool sign in too. Default: only when no federated identity provider is configured (an administrator then creates the users; self sign-up is off)."
  type        = bool
  default     = null
}
