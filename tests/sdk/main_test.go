package sdk_test

import (
	"testing"

	"gateway/mysql/mysqltest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }
