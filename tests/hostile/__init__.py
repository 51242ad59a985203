"""Hostile HTTP clients, reusable against any of our servers (see ``attacks``)."""
