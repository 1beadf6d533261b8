package webhooks_test

import (
	"testing"

	"gateway/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }
