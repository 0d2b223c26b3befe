"""Tests of scripts/check-structure's class-size rule: data members counted whatever their names,
and the baseline's "may only shrink" on them. Fixture sources in a temporary folder."""

import contextlib
import importlib.machinery
import importlib.util
import io
import os
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "scripts", "check-structure")


def load_checker():
    loader = importlib.machinery.SourceFileLoader("check_structure", SCRIPT)
    spec = importlib.util.spec_from_loader("check_structure", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


cs = load_checker()


class ClassSizeTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def source(self, text, name="unit.cc"):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))
        return path

    def sizes(self, text):
        found = cs.big_classes([self.source(text)])
        return {key: size for key, (size, _, _) in found.items()}

    def test_members_without_a_trailing_underscore_count(self):
        fields = "\n".join(f"  int field{i} = {i};" for i in range(31))
        self.assertEqual(self.sizes(f"struct Leader::Impl {{\n{fields}\n}};\n"),
                         {"class Leader::Impl": 31})

    def test_thirty_members_are_within_the_limit(self):
        fields = "\n".join(f"  int field{i};" for i in range(30))
        self.assertEqual(self.sizes(f"struct Impl {{\n{fields}\n}};\n"), {})

    def test_every_declarator_and_kind_of_member_counts(self):
        text = """\
            class Pump {
             public:
              Pump(int fd, std::string prefix);
              ~Pump();
              Pump& operator=(const Pump&) = delete;
              void Start(std::function<void()> on_close);
              int Size() const { return size_; }
              void Stop() {
                if (c == '{') Flush("(");
              }
              static constexpr std::size_t kMax = 64 * 1024;
              using Clock = std::chrono::steady_clock;
              enum class Read { kData, kEof };
              struct Errors {
                std::function<void(int)> on_error;
                bool reported = false;
              } errors_;
              TRAINLET_NO_COPY(Pump);
             private:
              int a = 0, b = 1, c;                       // three
              std::function<void(int, int)> callback;    // a comment, (with parens)
              std::map<int, std::string> names{{1, "a,b"}};
              std::vector<int> order = {
                  1, 2,
              };
              unsigned bits : 3;
              int table[4] = {};
              mutable std::mutex mu;
              std::atomic<bool> stopping{false};
              [[maybe_unused]] int spare;
              std::string url = "http://host;port";
            };
            """
        # errors_, a, b, c, callback, names, order, bits, table, mu, stopping, spare, url
        fields = "\n".join(f"  int more{i};" for i in range(18))
        text = textwrap.dedent(text).replace(" private:\n", f" private:\n{fields}\n")
        self.assertEqual(self.sizes(text), {"class Pump": 13 + 18})

    def test_nested_class_members_belong_to_the_nested_class(self):
        inner = "\n".join(f"    int inner{i};" for i in range(31))
        text = f"class Outer {{\n  struct Inner {{\n{inner}\n  }};\n  Inner one;\n}};\n"
        self.assertEqual(self.sizes(text), {"class Inner": 31})

    def test_a_baselined_class_may_only_shrink(self):
        fields = "\n".join(f"  int field{i};" for i in range(33))
        path = self.source(f"struct Leader::Impl {{\n{fields}\n}};\n")
        baseline = self.source("class Leader::Impl 32\n", name="baseline.txt")
        saved = cs.production_sources, cs.BASELINE, cs.long_functions
        cs.production_sources, cs.BASELINE = (lambda: [path]), baseline
        cs.long_functions = lambda files: {}  # function lengths: lizard's, not tested here
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(cs.main(), 1)
            self.assertIn("class Leader::Impl: 33, was 32 in the baseline", out.getvalue())
            with open(baseline, "w", encoding="utf-8") as f:
                f.write("class Leader::Impl 33\n")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(cs.main(), 0)
        finally:
            cs.production_sources, cs.BASELINE, cs.long_functions = saved


if __name__ == "__main__":
    unittest.main()
