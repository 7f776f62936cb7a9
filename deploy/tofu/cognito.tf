# Sign-in: Cognito is the OAuth 2.1 authorization server; macp serve is the resource server.
# Agents' MCP clients run the authorization-code + PKCE flow in the operator's browser against
# the hosted sign-in, with a pre-registered public client (Cognito has no dynamic client
# registration) and a loopback redirect: no secret anywhere in agent config. With a federated
# identity provider, only its users can obtain tokens: that membership is the access perimeter.

resource "aws_cognito_user_pool" "this" {
  name                = "${local.base}-users"
  deletion_protection = var.deletion_protection ? "ACTIVE" : "INACTIVE"

  # No self sign-up: users come from the federated IdP, or an administrator creates them.
  admin_create_user_config {
    allow_admin_create_user_only = true
  }

  auto_verified_attributes = ["email"]

  account_recovery_setting {
    recovery_mechanism {
      name     = "verified_email"
      priority = 1
    }
  }

  password_policy {
    minimum_length                   = 12
    require_lowercase                = true
    require_uppercase                = true
    require_numbers                  = true
    require_symbols                  = false
    temporary_password_validity_days = 3
  }

  # Local users may add an authenticator app; federated users get MFA from their IdP.
  mfa_configuration = "OPTIONAL"

  software_token_mfa_configuration {
    enabled = true
  }
}

resource "aws_cognito_user_pool_domain" "this" {
  domain       = local.cognito_domain_prefix
  user_pool_id = aws_cognito_user_pool.this.id
}

resource "aws_cognito_resource_server" "macp" {
  user_pool_id = aws_cognito_user_pool.this.id
  identifier   = var.resource_server_identifier
  name         = "MACP"

  dynamic "scope" {
    for_each = var.scopes

    content {
      scope_name        = scope.key
      scope_description = scope.value
    }
  }
}

# Placeholder for the upstream human IdP (var.idp_type = SAML or OIDC with its provider details).
resource "aws_cognito_identity_provider" "federated" {
  count = local.federated ? 1 : 0

  user_pool_id      = aws_cognito_user_pool.this.id
  provider_name     = var.idp_name
  provider_type     = var.idp_type
  provider_details  = var.idp_provider_details
  attribute_mapping = var.idp_attribute_mapping
}

# The public client every agent uses: auth code + PKCE, loopback redirects, no secret.
resource "aws_cognito_user_pool_client" "agents" {
  name         = "${local.base}-agents"
  user_pool_id = aws_cognito_user_pool.this.id

  generate_secret                      = false
  allowed_oauth_flows_user_pool_client = true
  allowed_oauth_flows                  = ["code"]
  allowed_oauth_scopes                 = concat(["openid", "email", "profile"], aws_cognito_resource_server.macp.scope_identifiers)
  # The agents' loopback redirects, and the web view's sign-in (MACP_WEB_CLIENT_ID is this client,
  # so people's tokens carry the same client_id audience as the agents').
  callback_urls = concat(var.callback_urls, ["${local.public_url}/auth/callback"])
  supported_identity_providers = concat(
    local.federated ? [aws_cognito_identity_provider.federated[0].provider_name] : [],
    local.allow_cognito_users ? ["COGNITO"] : [],
  )

  # Tokens come only from the hosted authorization-code flow (and are refreshed).
  explicit_auth_flows           = ["ALLOW_REFRESH_TOKEN_AUTH"]
  prevent_user_existence_errors = "ENABLED"
  enable_token_revocation       = true

  access_token_validity  = var.access_token_validity_minutes
  id_token_validity      = var.access_token_validity_minutes
  refresh_token_validity = var.refresh_token_validity_days

  token_validity_units {
    access_token  = "minutes"
    id_token      = "minutes"
    refresh_token = "days"
  }

  lifecycle {
    precondition {
      condition     = local.federated || local.allow_cognito_users
      error_message = "No one could sign in: configure a federated identity provider (idp_type) or set allow_cognito_users = true."
    }
  }
}
