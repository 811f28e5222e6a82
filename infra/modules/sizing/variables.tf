variable "roles" {
  description = "Sizing of each deployed role (the stack's roles map): Cloud Run max_instances, per-instance concurrency and request timeout, and the SQLAlchemy pool of each instance (db_pool_size + db_max_overflow connections at most)."
  type = map(object({
    max_instances   = number
    concurrency     = number
    timeout_seconds = number
    db_pool_size    = number
    db_max_overflow = number
  }))

  validation {
    condition     = alltrue([for r in values(var.roles) : r.concurrency >= 1 && r.max_instances >= 1 && r.db_pool_size >= 1 && r.db_max_overflow >= 0])
    error_message = "concurrency, max_instances and db_pool_size are at least 1; db_max_overflow at least 0."
  }
}

variable "database" {
  description = "The Cloud SQL instance's max_connections, the connections kept free for Cloud SQL's own agents and an operator's psql (reserved), and the pool of the migration job (one execution at a time)."
  type = object({
    max_connections      = number
    reserved_connections = optional(number, 10)
    migrate_connections  = optional(number, 2)
  })
}
