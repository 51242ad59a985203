"""Runtime agent: observes admission reviews in an SKR and delivers signed events to KCP."""
