"""Reading journals into Spark: driver-side planning and readers, executor-side decoding."""
