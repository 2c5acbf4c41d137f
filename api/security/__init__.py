"""Who may do what, shared by the HTTP API and the Kafka listener: principals and scopes, bearer tokens kept
hashed, SASL/PLAIN and SCRAM-SHA-256 credentials, TLS contexts, protected mode and the redaction of secrets."""
