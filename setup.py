"""Builds klake's compiled parts; everything else is in pyproject.toml.

- the record codec (`engine/format/_codec.pyx`, Cython);
- the JVM functions the append job calls inside Spark (`jobs/runtime/jvm/*.java`, compiled with the JDK's
  `javac` against pyspark's jars, a build requirement) into `jobs/runtime/klake-jvm.jar`, package data
  that the session adds to itself and its executors (`jobs.runtime.spark_session.add_jvm_functions`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

JAVA_SOURCES = Path("jobs/runtime/jvm")
JAR = Path("jobs/runtime/klake-jvm.jar")


def compile_jar(target: Path) -> None:
    """javac the sources against pyspark's Spark SQL API jar; the classes zipped as `target`."""
    import pyspark

    javac = shutil.which("javac")
    if javac is None:
        raise SystemExit("building klake needs a JDK's javac (17 or later) on PATH for jobs/runtime/jvm/")
    classpath = sorted((Path(pyspark.__file__).parent / "jars").glob("spark-sql-api_*.jar"))
    if not classpath:
        raise SystemExit(f"building klake: no spark-sql-api jar in {Path(pyspark.__file__).parent / 'jars'}")
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run([javac, "--release", "17", "-nowarn", "-cp", str(classpath[0]), "-d", classes,
                        *sorted(str(p) for p in JAVA_SOURCES.glob("*.java"))], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            for path in sorted(Path(classes).rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())


class BuildPyWithJar(build_py):
    """build_py, plus the jar: in the source tree for an editable install, else in the build."""

    def run(self) -> None:
        super().run()
        compile_jar(JAR if self.editable_mode else Path(self.build_lib) / JAR)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / JAR)]


setup(
    ext_modules=cythonize(
        [Extension("engine.format._codec", ["engine/format/_codec.pyx"], extra_compile_args=["-O3"])],
        compiler_directives={"language_level": 3},
    ),
    cmdclass={"build_py": BuildPyWithJar},
)
