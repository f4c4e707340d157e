package parquet

import "time"

// SetClock sets the clock that RollInterval reads.
func SetClock[T any](c *Config[T], now func() time.Time) { c.now = now }

// ClockEvery is how many records pass between two looks at the clock.
const ClockEvery = clockEvery
