"""kamal remove-student: the student, its folder, evaluations and the exports inside the workspace go; what lies
outside it, and a student another one stands on, are kept."""

from pathlib import Path


def test_a_student_goes_with_its_folder_and_workspace_exports_and_outside_exports_stay(kd_student, ws, tmp_path):
    kd_student("export", "kd", "--onnx")
    outside = tmp_path / "shipped"
    kd_student("export", "kd", "--onnx", "--out", outside)
    [student] = kd_student.json("students")
    inside = Path(kd_student.json("students")[0]["path"]).parents[1] / "exports" / "kd"
    assert inside.is_dir() and student["evaluations"]
    removed = kd_student("remove-student", "kd").stdout
    assert removed.strip() == ("Removed student kd, its folder and 1 export(s); 1 export(s) outside the workspace were "
                               "not touched")
    assert kd_student.json("students") == [] and not Path(student["path"]).exists() and not inside.exists()
    assert (outside / "model.onnx").is_file()
    assert kd_student("remove-student", "kd", code=2).stderr.strip() == "Error: no student named 'kd' (students: none yet)"


def test_a_student_registered_as_a_teacher_is_kept_until_that_teacher_goes(kd_student, ws):
    from kamalcli.students.extend import student_as_teachers
    from kamalcli.workspace.folder import Workspace
    from kamalcli.workspace.store import Store

    store = Store.open(Workspace(ws))
    try:
        [teacher] = student_as_teachers(Workspace(ws), store, store.student("kd"), say=lambda line: None)
    finally:
        store.close()
    refused = kd_student("remove-student", "kd", code=2).stderr
    assert f"teacher {teacher.name} reads kd's folder" in refused and len(refused.strip().splitlines()) == 1
    assert [s["name"] for s in kd_student.json("students")] == ["kd"]
    kd_student("remove-teacher", teacher.name)
    folder = Path(kd_student.json("students")[0]["path"])
    assert folder.is_dir()  # the teacher read the student's folder; removing it leaves the folder to the student
    kd_student("remove-student", "kd")
    assert not folder.exists()
