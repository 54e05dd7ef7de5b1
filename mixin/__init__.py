"""The mixin: one config of selectors and thresholds that dashboards/ and alerts/ both read."""
