output "mcp_url" {
  description = "The MCP endpoint agents connect to (Streamable HTTP)."
  value       = "${local.public_url}/mcp"
}

output "load_balancer_dns_name" {
  description = "DNS name of the internal load balancer (point a private DNS record for public_url at it)."
  value       = aws_lb.this.dns_name
}

output "table_names" {
  description = "DynamoDB table names by their schema.json name."
  value       = { for k, t in local.tables : k => t.name }
}

output "table_arns" {
  description = "DynamoDB table ARNs by their schema.json name."
  value       = { for k, t in local.tables : k => t.arn }
}

output "artifact_bucket" {
  description = "Name of the private artifact bucket."
  value       = aws_s3_bucket.artifacts.bucket
}

output "vector_bucket_name" {
  description = "Name of the S3 Vectors bucket."
  value       = aws_s3vectors_vector_bucket.vectors.vector_bucket_name
}

output "vector_index_name" {
  description = "Name of the S3 Vectors index."
  value       = aws_s3vectors_index.findings.index_name
}

output "vector_index_arn" {
  description = "ARN of the S3 Vectors index."
  value       = aws_s3vectors_index.findings.index_arn
}

output "server_role_arn" {
  description = "ARN of the server's IAM role."
  value       = aws_iam_role.server.arn
}

output "vpc_id" {
  description = "The VPC (peer or attach the agents' networks to it)."
  value       = aws_vpc.this.id
}

output "private_subnet_ids" {
  description = "Private subnets of the load balancer and the server."
  value       = aws_subnet.private[*].id
}

output "cognito_user_pool_id" {
  description = "The Cognito user pool."
  value       = aws_cognito_user_pool.this.id
}

output "oauth_issuer" {
  description = "Token issuer (MACP_AUTH_ISSUER); its JWKS is <issuer>/.well-known/jwks.json."
  value       = local.cognito_issuer
}

output "oauth_authorize_url" {
  description = "Hosted sign-in authorization endpoint."
  value       = "https://${aws_cognito_user_pool_domain.this.domain}.auth.${var.region}.amazoncognito.com/oauth2/authorize"
}

output "oauth_token_url" {
  description = "Token endpoint."
  value       = "https://${aws_cognito_user_pool_domain.this.domain}.auth.${var.region}.amazoncognito.com/oauth2/token"
}

output "agent_client_id" {
  description = "Client id of the public agent client (not a secret: it goes into every agent's MCP config)."
  value       = aws_cognito_user_pool_client.agents.id
}

output "oauth_scopes" {
  description = "Scopes agents request."
  value       = aws_cognito_resource_server.macp.scope_identifiers
}

output "saml_acs_url" {
  description = "For a SAML IdP: the assertion consumer service URL to register there (audience urn:amazon:cognito:sp:<user pool id>)."
  value       = "https://${aws_cognito_user_pool_domain.this.domain}.auth.${var.region}.amazoncognito.com/saml2/idpresponse"
}

output "macp_environment" {
  description = "The environment macp serve runs with (/etc/macp/macp.env on the instance)."
  value       = local.macp_env
}

output "kiro_mcp_config" {
  description = "A Kiro mcp.json entry for this server (redirectUri must be one of callback_urls)."
  value = jsonencode({
    mcpServers = {
      macp = {
        url = "${local.public_url}/mcp"
        oauth = {
          clientId    = aws_cognito_user_pool_client.agents.id
          redirectUri = var.callback_urls[0]
        }
      }
    }
  })
}
