"""The loop: cluster view + metrics → snapshot → decide → publish (and, on the leader, VA status)."""
