"""lagwatch: Kafka consumer-lag monitoring and alerting.

Data flows one way: collect -> snapshot -> history -> rules -> alerts -> notify.
"""

__version__ = "0.1.0"
