package main

import "gorm.io/gorm/schema"

// gormSchema places GORM's tables in the given PostgreSQL schema.
func gormSchema(name string) schema.Namer {
	return schema.NamingStrategy{TablePrefix: name + "."}
}
