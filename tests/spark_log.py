"""The log lines the shared SparkSession's JVM writes (driver and, in local mode, executors) while a block runs:
a log4j2 appender on the root logger, at WARN for that time."""

import contextlib


@contextlib.contextmanager
def spark_log(spark, level="WARN"):
    """Yields a function returning the lines logged so far (`LEVEL logger: message`, then any stack trace)."""
    jvm = spark._jvm
    log4j = jvm.org.apache.logging.log4j
    context = log4j.LogManager.getContext(False)
    config = context.getConfiguration()
    writer = jvm.java.io.StringWriter()
    layout = log4j.core.layout.PatternLayout.newBuilder().withPattern("%p %c: %m%n").build()
    appender = log4j.core.appender.WriterAppender.createAppender(layout, None, writer, "hoodie-test-log", False, True)
    appender.start()
    root = config.getRootLogger()
    previous = root.getLevel()
    root.addAppender(appender, None, None)
    root.setLevel(log4j.Level.toLevel(level))
    context.updateLoggers()
    try:
        yield lambda: str(writer.toString())
    finally:
        root.removeAppender("hoodie-test-log")
        root.setLevel(previous)
        context.updateLoggers()
        appender.stop()
