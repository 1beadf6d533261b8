module gateway/clients/go

go 1.26.8
