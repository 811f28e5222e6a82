# Generated from shared/noetl_cloud/maintenance/schedule.py by `make schedule`: do not edit.
# The built-in maintenance jobs; main.tf turns each into a Cloud Scheduler job calling local.routes[route].
locals {
  maintenance_schedule = {
    outbox-sweep = {
      description = "Publish outbox rows whose first publish failed (execute)."
      schedule    = "* * * * *"
      setting     = "outbox_sweep"
      route       = "outbox_sweep"
      needs       = "execute"
    }
    command-reaper = {
      description = "Re-issue commands whose claim lease expired; fail them after their attempts (execute)."
      schedule    = "* * * * *"
      setting     = "command_reaper"
      route       = "command_reaper"
      needs       = "worker"
    }
    retention = {
      description = "Keep partitions ahead; archive and remove expired executions; drop old partitions (execute)."
      schedule    = "23 3 * * *"
      setting     = "retention"
      route       = "retention"
      needs       = "execute"
    }
    subscription-tick = {
      description = "Run the due slot of every active scheduled subscription (activation: scheduled) once (execute)."
      schedule    = "* * * * *"
      setting     = "subscription_tick"
      route       = "subscription_tick"
      needs       = "execute"
    }
    frame-reaper = {
      description = "Release expired frame leases (frames)."
      schedule    = "* * * * *"
      setting     = "frame_reaper"
      route       = "frame_reaper"
      needs       = "frames"
    }
    projector-catch-up = {
      description = "Fold executions whose projection fell behind their log with no delivery due (projector)."
      schedule    = "*/5 * * * *"
      setting     = "projector_catch_up"
      route       = "projector_catch_up"
      needs       = "projector"
    }
    spool-drainer = {
      description = "Drain spooled items whose downstream circuit has closed (spool_drainer)."
      schedule    = "* * * * *"
      setting     = "drainer"
      route       = "spool_drain"
      needs       = "spool_drainer"
    }
  }
}
