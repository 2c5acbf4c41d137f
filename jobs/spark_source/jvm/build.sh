#!/bin/sh
# Compiles the JVM columnar reader (src/main/java) against pyspark's jars into mqindex-spark.jar, next to this
# script. Usage: build.sh PYTHON (the venv's python, whose pyspark gives the jars). Called by the Makefile's
# install step; needs a JDK 17 (javac, jar).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${1:-python3}
jars=$("$python" -c "import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
javac -nowarn --release 17 -cp "$jars/*" -d "$out" $(find "$here/src/main/java" -name '*.java')
cp -R "$here/src/main/resources/." "$out/"  # META-INF/services: Spark finds the source by its name, mqindex
jar cf "$here/mqindex-spark.jar.tmp" -C "$out" .
mv "$here/mqindex-spark.jar.tmp" "$here/mqindex-spark.jar"
