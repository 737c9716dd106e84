"""The admin's one time format (absolute, with seconds) for every date Django renders itself:
read-only fields, list columns of plain datetimes, date hierarchies. See kernel.timefmt."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
