"""Reservations for imminent large jobs and the backfill policy (reservation issues)."""
